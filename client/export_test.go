package client

// SetWaitChunk sets the number of ids per ordered consumer of WaitAll.
func SetWaitChunk(c *Client, n int) { c.waitChunk = n }
