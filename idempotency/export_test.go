package idempotency

// DecodeRecord exposes the Redis record reader to the fuzz test.
func DecodeRecord(c Config, h map[string]string) (fp, token string, done bool, a Answer, err error) {
	r, err := c.withDefaults().decodeRecord(h)
	return r.fp, r.token, r.done, r.answer, err
}
