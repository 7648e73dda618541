"""The observer runtime: the hub that feeds each observer from the log at its watermark and
restarts it, and the plugin loader that builds observers and distillers named in config."""
