"""The memory browser (`forged ui`): a page on loopback, its own small HTTP server with the
token, Host, Origin and CSRF checks, talking to the daemon only through `forged.client`."""
