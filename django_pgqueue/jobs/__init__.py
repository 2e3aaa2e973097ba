"""Jobs of Django's Tasks framework: the store that owns every change of their rows."""
