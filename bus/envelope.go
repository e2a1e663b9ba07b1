package bus

import (
	"errors"
	"fmt"

	"github.com/vmihailenco/msgpack/v5"
)

// Kind says what an envelope carries (docs/PROTOCOL.md, between instances).
type Kind uint8

// The envelope kinds. Their numbers are on the wire: append, never renumber.
const (
	KindAssign   Kind = 1 // requester → owner: run this task on this node
	KindChunk    Kind = 2 // owner → requester: one streamed delta
	KindResult   Kind = 3 // owner → requester: the outcome (or a refusal)
	KindNodeGone Kind = 4 // owner → requester: the node's socket closed mid-task
	KindReplace  Kind = 5 // new owner → old owner: close your socket of this node
	KindCancel   Kind = 6 // requester → owner: stop this task
	KindControl  Kind = 7 // any instance → owner: pause, resume or drain this node (Reason: the action; Content: why)
)

var kindNames = [...]string{"", "assign", "chunk", "result", "node_gone", "replace", "cancel", "control"}

func (k Kind) String() string {
	if int(k) < len(kindNames) && k != 0 {
		return kindNames[k]
	}
	return fmt.Sprintf("kind(%d)", uint8(k))
}

// Envelope is one message between instances. Which fields are set depends
// on Kind; the rest stay zero and cost nothing on the wire (omitempty).
// A delivered envelope is shared: receivers must not modify it.
type Envelope struct {
	Kind   Kind   `msgpack:"k"`
	From   string `msgpack:"f,omitempty"` // sending instance id
	TaskID string `msgpack:"t,omitempty"`
	NodeID string `msgpack:"n,omitempty"`
	Gen    uint64 `msgpack:"g,omitempty"` // the node connection's fencing generation

	// assign
	TaskType string `msgpack:"ty,omitempty"`
	Content  string `msgpack:"c,omitempty"`
	Params   []byte `msgpack:"p,omitempty"` // the client's params, as a JSON object
	Stream   bool   `msgpack:"s,omitempty"`
	Deadline int64  `msgpack:"d,omitempty"`  // unix milliseconds; the owner forgets the task after it
	ReplyTo  string `msgpack:"r,omitempty"`  // requester instance id
	Account  string `msgpack:"a,omitempty"`  // the requesting account's id (the owner's quarantine counts accounts)
	KeyID    string `msgpack:"ky,omitempty"` // the requesting key's id (the owner's usage reports)

	// chunk
	Seq   uint32 `msgpack:"q,omitempty"` // 1, 2, 3, … per task
	Delta string `msgpack:"dl,omitempty"`

	// result
	Result *Result `msgpack:"res,omitempty"`

	// cancel, node_gone, replace
	Reason string `msgpack:"rs,omitempty"`
}

// Result is the outcome of a task as the owner saw it. Either the node
// answered (Code is empty, Status is its status) or the owner failed the
// task itself (Code says why).
type Result struct {
	Status       string `msgpack:"st,omitempty"` // the node's status: "completed" or "failed"
	Text         string `msgpack:"tx,omitempty"`
	ProcessingMs int64  `msgpack:"ms,omitempty"` // as the node reported it
	HasUsage     bool   `msgpack:"hu,omitempty"`
	PromptTokens int64  `msgpack:"pt,omitempty"`
	OutputTokens int64  `msgpack:"ot,omitempty"`
	Chunks       uint32 `msgpack:"ch,omitempty"` // chunks sent before this result, so gaps are seen

	Code    string `msgpack:"co,omitempty"` // set when the owner failed the task: see tasks' error codes
	Message string `msgpack:"me,omitempty"`
}

// ErrMalformed is returned by Decode for bytes that are not an envelope.
var ErrMalformed = errors.New("bus: malformed envelope")

// Encode serialises an envelope for the wire.
func Encode(e *Envelope) ([]byte, error) {
	b, err := msgpack.Marshal(e)
	if err != nil {
		return nil, fmt.Errorf("bus: encode %s: %w", e.Kind, err)
	}
	return b, nil
}

// Decode parses an envelope and checks it is one a receiver can act on: a
// known kind with the fields that kind needs.
func Decode(b []byte) (*Envelope, error) {
	var e Envelope
	if err := msgpack.Unmarshal(b, &e); err != nil {
		return nil, fmt.Errorf("%w: %v", ErrMalformed, err)
	}
	if err := e.Validate(); err != nil {
		return nil, err
	}
	return &e, nil
}

// Validate checks that an envelope has the fields its kind needs.
func (e *Envelope) Validate() error {
	switch e.Kind {
	case KindAssign:
		if e.TaskID == "" || e.NodeID == "" || e.ReplyTo == "" {
			return fmt.Errorf("%w: assign needs task, node and reply_to", ErrMalformed)
		}
	case KindChunk, KindNodeGone, KindCancel:
		if e.TaskID == "" {
			return fmt.Errorf("%w: %s needs a task id", ErrMalformed, e.Kind)
		}
	case KindResult:
		if e.TaskID == "" || e.Result == nil {
			return fmt.Errorf("%w: result needs a task id and a result", ErrMalformed)
		}
	case KindReplace:
		if e.NodeID == "" {
			return fmt.Errorf("%w: replace needs a node id", ErrMalformed)
		}
	case KindControl:
		if e.NodeID == "" || e.Reason == "" {
			return fmt.Errorf("%w: control needs a node id and an action", ErrMalformed)
		}
	default:
		return fmt.Errorf("%w: unknown kind %d", ErrMalformed, uint8(e.Kind))
	}
	return nil
}
