"""Maintenance services over a log root: retention and (hook) compaction."""
