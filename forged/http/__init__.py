"""HTTP/1.1 on the Unix socket: connections and their limits, the route table, query strings;
the only layer that knows requests, responses and status codes."""
