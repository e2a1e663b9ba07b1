package server

import (
	"crypto/sha256"
	"encoding/hex"
	"net/http"
	"strconv"

	"github.com/labstack/echo/v4"
)

// HeaderSessionID names a request's session for session affinity.
const HeaderSessionID = "X-Session-Id"

// maxSessionID bounds X-Session-Id. The id is hashed before it is kept
// (sessionOf: the Redis key is 32 hex digits whatever it was), so the
// bound is on what a client makes the instance hash and hold per request:
// an id names a conversation, and 128 characters name any.
const maxSessionID = 128

// checkSessionID refuses an X-Session-Id over maxSessionID characters, of
// anything but printable ASCII (space to ~), or given twice. Every route
// that reads it (sessionOf) checks it first.
func checkSessionID(c echo.Context) error {
	ids := c.Request().Header.Values(HeaderSessionID)
	if len(ids) > 1 {
		return newError(http.StatusUnprocessableEntity, CodeInvalidRequest, HeaderSessionID+" is given more than once; give it once")
	}
	if len(ids) == 0 {
		return nil
	}
	if len(ids[0]) > maxSessionID {
		return newError(http.StatusUnprocessableEntity, CodeInvalidRequest,
			HeaderSessionID+" is "+strconv.Itoa(len(ids[0]))+" bytes; at most "+strconv.Itoa(maxSessionID))
	}
	for i := range len(ids[0]) {
		if b := ids[0][i]; b < ' ' || b > '~' {
			return newError(http.StatusUnprocessableEntity, CodeInvalidRequest, HeaderSessionID+" may hold printable ASCII only (space to ~)")
		}
	}
	return nil
}

// sessionOf is the affinity key of a request: its account and the session
// id the client named (X-Session-Id, checked by checkSessionID, or on the
// OpenAI routes the body's prompt_cache_key or user), hashed so that any
// id makes a short key and one account's ids never meet another's; ""
// when it named none.
func sessionOf(c echo.Context, bodyID string) string {
	id := c.Request().Header.Get(HeaderSessionID)
	if id == "" {
		id = bodyID
	}
	if id == "" {
		return ""
	}
	sum := sha256.Sum256([]byte(accountOf(c).ID + "\x00" + id))
	return hex.EncodeToString(sum[:16])
}
