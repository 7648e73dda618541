"""The daemon process: the root nursery that starts every service, its lifecycle, signals,
systemd's protocols, logging and the bundled model child it supervises."""
