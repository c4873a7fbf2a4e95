"""The six seed cases as data files, loaded with `datasets`."""
