"""Automation of VACUUM and metadata cleanup: declarative conditions, no schedule per table.

The `[t, vacuum]` and `[t, metadata_cleanup]` assets of a table whose policy sets a cron
carry `AutomationCondition.cron_tick_passed(cron, "UTC") & ~in_progress()`
(`delta_ops.defs.translator.cron_condition`): once per tick of the cron, a run of that asset.
One sensor, `delta_tables_automation`, evaluates them for every table; it is stopped by
default (the operations delete files): turn it on in the UI's Automation tab. A policy cron
of `null` means no condition. Times are UTC.

Protocol sections: "VACUUM Protocol Check", "Metadata Cleanup" (through the assets).
"""

from dagster import AssetSelection, AutomationConditionSensorDefinition, DefaultSensorStatus

from delta_ops.defs.keys import METADATA_CLEANUP, VACUUM

AUTOMATION_SENSOR = "delta_tables_automation"
#: Operation -> the policy section holding its cron.
SCHEDULED = {VACUUM: "vacuum", METADATA_CLEANUP: "cleanup"}


def automation_sensor() -> AutomationConditionSensorDefinition:
    """The one sensor evaluating every table's cron conditions (stopped by default)."""
    return AutomationConditionSensorDefinition(
        AUTOMATION_SENSOR,
        target=AssetSelection.all(),
        default_status=DefaultSensorStatus.STOPPED,
        minimum_interval_seconds=60,
        description="Requests VACUUM and metadata cleanup of each table on its policy's "
        "cron (UTC): one run per cron tick.",
    )


__all__ = ["AUTOMATION_SENSOR", "SCHEDULED", "automation_sensor"]
