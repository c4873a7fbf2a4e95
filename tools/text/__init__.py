"""What the tools read text with, below the sources that read it: the one folding of compatibility
forms (folding.py), the log search analyzer (search.py) and the JSON lines reader (jsonlines.py).
They import nothing else of the project."""
