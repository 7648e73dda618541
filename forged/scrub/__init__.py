"""Secret scrubbing: the rules of both passes, the regex vocabulary and provider tables they
are written in, the one-scan prefilter, and the scan that redacts before anything is stored."""
