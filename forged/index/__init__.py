"""Index: the turns' full-text index beside the store (tantivy), derived from the log and
rebuilt from it at will, and the keeper that follows the log into it."""
