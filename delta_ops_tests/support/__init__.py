"""Helper code shared by the tests (imported by test modules, never a test module itself)."""
