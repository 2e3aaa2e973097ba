"""A module that fails while it is imported (not with ImportError): what a settings
hook pointing at a module with a bad top-level statement looks like to the checks."""

raise RuntimeError("this module is broken at import")
