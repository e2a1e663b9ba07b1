package server

import (
	"github.com/labstack/echo/v4"
	segjson "github.com/segmentio/encoding/json"
)

// jsonSerializer is echo's JSON writer with the answer of every task (a
// taskResult, not indented) encoded by segmentio/encoding/json: encoding/
// json's reflection was 3–4 % of the instance's CPU at 2,500 requests/s,
// and segmentio writes the same bytes (FuzzTaskAnswerAsEncodingJSON) in
// less time. Every other answer keeps encoding/json: some carry what nodes
// sent as json.RawMessage (model_info), which encoding/json checks and
// compacts on the way out and segmentio writes as it is.
type jsonSerializer struct{ echo.DefaultJSONSerializer }

func (s jsonSerializer) Serialize(c echo.Context, i any, indent string) error {
	if r, ok := i.(taskResult); ok && indent == "" {
		return segjson.NewEncoder(c.Response()).Encode(r)
	}
	return s.DefaultJSONSerializer.Serialize(c, i, indent)
}
