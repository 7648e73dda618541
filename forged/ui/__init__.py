"""The memory browser (`forged ui`): a page on loopback, its own small HTTP server with the
one-time token, session header, Host and Origin checks, talking to the daemon only through
`forged.client`."""
