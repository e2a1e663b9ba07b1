package nodes

import (
	"encoding/json"

	segjson "github.com/segmentio/encoding/json"
	"github.com/switchyard-dev/switchyard/sdk/wire"
)

// Wire is the coordinator's codec for the messages of every task: the
// task_assign it sends (tasks), and the envelope, task_result and
// task_chunk a node sends back (Session). It is segmentio/encoding/json,
// which reads these frames several times faster than encoding/json, with
// fewer allocations, and writes them faster (BenchmarkReadNodeResult,
// BenchmarkEncodeAssign). It writes what encoding/json writes, byte for
// byte (FuzzWireEncodesAssignAsStandard), but for one check it leaves out:
// a json.RawMessage is written as it is, not checked to be JSON (the
// assign's params were checked by the requesting instance: server's
// checkParams). Wherever it accepts a
// message its reading is encoding/json's (FuzzFastWireAgrees); a message
// it refuses is read again by wire.Standard, so the node is told what
// encoding/json's reading finds, in the same words. The rarer messages
// keep wire's own functions.
var Wire = wire.NewCodec(segjson.Marshal, segjson.Unmarshal)

func decodeEnvelope(b []byte) (wire.Envelope, error) {
	if e, err := Wire.DecodeEnvelope(b); err == nil {
		return e, nil
	}
	return wire.Standard.DecodeEnvelope(b)
}

func decodeTaskResult(p json.RawMessage) (wire.TaskResultPayload, error) {
	if r, err := Wire.DecodeTaskResult(p); err == nil {
		return r, nil
	}
	return wire.Standard.DecodeTaskResult(p)
}

func decodeTaskChunk(p json.RawMessage) (wire.TaskChunkPayload, error) {
	if c, err := Wire.DecodeTaskChunk(p); err == nil {
		return c, nil
	}
	return wire.Standard.DecodeTaskChunk(p)
}
