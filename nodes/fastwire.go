package nodes

import (
	segjson "github.com/segmentio/encoding/json"
	"github.com/switchyard-dev/switchyard/sdk/wire"
)

// Wire is the coordinator's codec for the messages of every task: the
// task_assign it sends (tasks), and the envelope, task_result and
// task_chunk a node sends back (Session, through readFast). It is
// segmentio/encoding/json, which reads these frames several times faster
// than encoding/json, with fewer allocations, and writes them faster
// (BenchmarkReadNodeResult, BenchmarkEncodeAssign). It writes what
// encoding/json writes, byte for byte (FuzzWireEncodesAssignAsStandard),
// but for one check it leaves out: a json.RawMessage is written as it is,
// not checked to be JSON (the assign's params were checked by the
// requesting instance: server's checkParams). The rarer messages keep
// wire's own functions.
var Wire = wire.NewCodec(segjson.Marshal, segjson.Unmarshal)

// readFast reads b with Wire's read and, where Wire refuses it, again with
// wire.Standard's: wherever Wire accepts a message its reading is
// encoding/json's (FuzzFastWireAgrees), and a node whose message is refused
// is told what encoding/json's reading finds, in the same words. read is a
// method expression (wire.Codec.DecodeEnvelope): nothing is allocated to
// pass it.
func readFast[T any, B ~[]byte](b B, read func(wire.Codec, B) (T, error)) (T, error) {
	if v, err := read(Wire, b); err == nil {
		return v, nil
	}
	return read(wire.Standard, b)
}
