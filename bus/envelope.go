package bus

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"math"
	"sync"

	"github.com/vmihailenco/msgpack/v5"
	"github.com/vmihailenco/msgpack/v5/msgpcode"
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
	// ResumeText, on the assign of a stream continued after its node went
	// away, is the text its client already has (task_assign's resume_text).
	ResumeText string `msgpack:"rt,omitempty"`

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

// Encode serialises an envelope for the wire: a msgpack map of the fields
// that are set, keyed by their msgpack tags, in the struct's order. It
// writes them field by field (encodeFields), byte for byte what
// msgpack.Marshal writes for the struct (TestEncodeIsMarshal), without
// Marshal's reflection: an envelope is encoded and decoded on every hop of
// a cross-instance request, and reflection was most of the 28 allocations
// an assign's round trip through the codec cost.
func Encode(e *Envelope) ([]byte, error) {
	c := encoders.Get().(*encoder)
	c.buf.Reset()
	err := e.encodeFields(c.enc)
	b := bytes.Clone(c.buf.Bytes())
	if c.buf.Cap() <= maxPooledBuffer {
		encoders.Put(c)
	}
	if err != nil {
		return nil, fmt.Errorf("bus: encode %s: %w", e.Kind, err)
	}
	return b, nil
}

// maxPooledBuffer is the largest encoding buffer kept for reuse: one that
// grew for a large result is let go rather than held by the pool.
const maxPooledBuffer = 64 << 10

type encoder struct {
	buf bytes.Buffer
	enc *msgpack.Encoder
}

var encoders = sync.Pool{New: func() any {
	c := &encoder{}
	c.enc = msgpack.NewEncoder(&c.buf)
	return c
}}

// encodeFields writes e as msgpack.Marshal would: a map of the fields not
// empty (omitempty), each number in its own type's width.
func (e *Envelope) encodeFields(enc *msgpack.Encoder) error {
	n := 1 // k: never omitted
	for _, set := range [...]bool{
		e.From != "", e.TaskID != "", e.NodeID != "", e.Gen != 0, e.TaskType != "", e.Content != "",
		len(e.Params) != 0, e.Stream, e.Deadline != 0, e.ReplyTo != "", e.Account != "", e.KeyID != "", e.ResumeText != "",
		e.Seq != 0, e.Delta != "", e.Result != nil, e.Reason != "",
	} {
		if set {
			n++
		}
	}
	w := fieldWriter{enc: enc}
	w.mapLen(n)
	w.key("k")
	w.err(enc.EncodeUint8(uint8(e.Kind)))
	w.str("f", e.From)
	w.str("t", e.TaskID)
	w.str("n", e.NodeID)
	w.uint64("g", e.Gen)
	w.str("ty", e.TaskType)
	w.str("c", e.Content)
	if len(e.Params) != 0 {
		w.key("p")
		w.err(enc.EncodeBytes(e.Params))
	}
	if e.Stream {
		w.key("s")
		w.err(enc.EncodeBool(true))
	}
	w.int64("d", e.Deadline)
	w.str("r", e.ReplyTo)
	w.str("a", e.Account)
	w.str("ky", e.KeyID)
	w.str("rt", e.ResumeText)
	if e.Seq != 0 {
		w.key("q")
		w.err(enc.EncodeUint32(e.Seq))
	}
	w.str("dl", e.Delta)
	if e.Result != nil {
		w.key("res")
		if w.e == nil {
			w.e = e.Result.encodeFields(enc)
		}
	}
	w.str("rs", e.Reason)
	return w.e
}

func (r *Result) encodeFields(enc *msgpack.Encoder) error {
	n := 0
	for _, set := range [...]bool{
		r.Status != "", r.Text != "", r.ProcessingMs != 0, r.HasUsage, r.PromptTokens != 0,
		r.OutputTokens != 0, r.Chunks != 0, r.Code != "", r.Message != "",
	} {
		if set {
			n++
		}
	}
	w := fieldWriter{enc: enc}
	w.mapLen(n)
	w.str("st", r.Status)
	w.str("tx", r.Text)
	w.int64("ms", r.ProcessingMs)
	if r.HasUsage {
		w.key("hu")
		w.err(enc.EncodeBool(true))
	}
	w.int64("pt", r.PromptTokens)
	w.int64("ot", r.OutputTokens)
	if r.Chunks != 0 {
		w.key("ch")
		w.err(enc.EncodeUint32(r.Chunks))
	}
	w.str("co", r.Code)
	w.str("me", r.Message)
	return w.e
}

// fieldWriter writes a struct's fields, omitting the empty ones, and keeps
// the first error (a write to a bytes.Buffer fails only out of memory).
type fieldWriter struct {
	enc *msgpack.Encoder
	e   error
}

func (w *fieldWriter) err(err error) {
	if w.e == nil {
		w.e = err
	}
}

func (w *fieldWriter) mapLen(n int) { w.err(w.enc.EncodeMapLen(n)) }

func (w *fieldWriter) key(k string) { w.err(w.enc.EncodeString(k)) }

func (w *fieldWriter) str(k, v string) {
	if v != "" {
		w.key(k)
		w.err(w.enc.EncodeString(v))
	}
}

func (w *fieldWriter) uint64(k string, v uint64) {
	if v != 0 {
		w.key(k)
		w.err(w.enc.EncodeUint64(v))
	}
}

func (w *fieldWriter) int64(k string, v int64) {
	if v != 0 {
		w.key(k)
		w.err(w.enc.EncodeInt64(v))
	}
}

// Decode parses an envelope and checks it is one a receiver can act on: a
// known kind with the fields that kind needs. It reads the map field by
// field (decoder.envelope); a key it does not know is skipped, as
// msgpack.Unmarshal skips it, so an envelope from a newer instance with a
// field more still decodes. Every length on the wire is checked against
// the bytes left before anything is allocated for it: msgpack's own
// decoding allocates what a length claims (4 GiB for the 5-byte header of
// a bin32, through msgpack.Unmarshal, which Decode used to call), or a
// megabyte at a time for a string or a skipped value.
func Decode(b []byte) (*Envelope, error) {
	d := decoders.Get().(*decoder)
	d.r.Reset(b)
	d.dec.Reset(&d.r)
	var e Envelope
	err := d.envelope(&e)
	d.r.Reset(nil)
	if cap(d.scratch) <= maxPooledBuffer {
		decoders.Put(d)
	}
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrMalformed, err)
	}
	if err := e.Validate(); err != nil {
		return nil, err
	}
	return &e, nil
}

// decoder reads one envelope. The msgpack decoder reads r directly (a
// bytes.Reader is a ByteScanner: nothing is buffered ahead), so r.Len() is
// what is left of the envelope.
type decoder struct {
	r       bytes.Reader
	dec     *msgpack.Decoder
	scratch []byte // a string's bytes before they are one
}

var decoders = sync.Pool{New: func() any {
	d := &decoder{}
	d.dec = msgpack.NewDecoder(&d.r)
	return d
}}

var (
	errNotMap = errors.New("not a map")
	errLength = errors.New("a length longer than what is left of the envelope")
	errDepth  = errors.New("values nested too deep")
)

// maxSkipDepth bounds the nesting of a value skipped: each level costs the
// skipping a stack frame, and costs the sender one byte.
const maxSkipDepth = 32

// envelope reads a map of envelope fields into e.
func (d *decoder) envelope(e *Envelope) error {
	n, err := d.mapLen()
	if err != nil {
		return err
	}
	if n < 0 {
		return errNotMap
	}
	var kb [16]byte
	for range n {
		k, err := d.key(kb[:])
		if err != nil {
			return err
		}
		switch string(k) {
		case "k":
			var v uint64
			if v, err = d.dec.DecodeUint64(); err == nil && v > math.MaxUint8 {
				err = fmt.Errorf("kind %d out of range", v)
			}
			e.Kind = Kind(v)
		case "f":
			e.From, err = d.str()
		case "t":
			e.TaskID, err = d.str()
		case "n":
			e.NodeID, err = d.str()
		case "g":
			e.Gen, err = d.dec.DecodeUint64()
		case "ty":
			e.TaskType, err = d.str()
		case "c":
			e.Content, err = d.str()
		case "p":
			e.Params, err = d.bytes()
		case "s":
			e.Stream, err = d.dec.DecodeBool()
		case "d":
			e.Deadline, err = d.dec.DecodeInt64()
		case "r":
			e.ReplyTo, err = d.str()
		case "a":
			e.Account, err = d.str()
		case "ky":
			e.KeyID, err = d.str()
		case "rt":
			e.ResumeText, err = d.str()
		case "q":
			e.Seq, err = d.uint32()
		case "dl":
			e.Delta, err = d.str()
		case "res":
			e.Result, err = d.result()
		case "rs":
			e.Reason, err = d.str()
		default:
			err = d.skip(0)
		}
		if err != nil {
			return fmt.Errorf("field %q: %w", k, err)
		}
	}
	return nil
}

// result reads a result's map, or nil.
func (d *decoder) result() (*Result, error) {
	n, err := d.mapLen()
	if err != nil || n < 0 {
		return nil, err // nil: no result
	}
	r := &Result{}
	var kb [16]byte
	for range n {
		k, err := d.key(kb[:])
		if err != nil {
			return nil, err
		}
		switch string(k) {
		case "st":
			r.Status, err = d.str()
		case "tx":
			r.Text, err = d.str()
		case "ms":
			r.ProcessingMs, err = d.dec.DecodeInt64()
		case "hu":
			r.HasUsage, err = d.dec.DecodeBool()
		case "pt":
			r.PromptTokens, err = d.dec.DecodeInt64()
		case "ot":
			r.OutputTokens, err = d.dec.DecodeInt64()
		case "ch":
			r.Chunks, err = d.uint32()
		case "co":
			r.Code, err = d.str()
		case "me":
			r.Message, err = d.str()
		default:
			err = d.skip(0)
		}
		if err != nil {
			return nil, fmt.Errorf("result field %q: %w", k, err)
		}
	}
	return r, nil
}

// mapLen reads a map header (-1: nil). Each entry takes at least two
// bytes, so a count beyond what is left is refused.
func (d *decoder) mapLen() (int, error) {
	n, err := d.dec.DecodeMapLen()
	if err == nil && n > d.r.Len() {
		err = errLength
	}
	return n, err
}

// size reads the length of a str or bin (-1: nil) and checks that many
// bytes are left.
func (d *decoder) size() (int, error) {
	n, err := d.dec.DecodeBytesLen()
	if err == nil && n > d.r.Len() {
		err = errLength
	}
	return n, err
}

// key reads a map key into buf. A key longer than buf (none of ours is)
// is skipped and comes back empty, a key nobody knows, as does a nil one.
func (d *decoder) key(buf []byte) ([]byte, error) {
	n, err := d.size()
	if err != nil || n <= 0 {
		return nil, err
	}
	if n > len(buf) {
		_, err := d.r.Seek(int64(n), io.SeekCurrent)
		return nil, err
	}
	return buf[:n], d.dec.ReadFull(buf[:n])
}

// str reads a str (or bin) value; nil reads as empty.
func (d *decoder) str() (string, error) {
	n, err := d.size()
	if err != nil || n <= 0 {
		return "", err
	}
	if cap(d.scratch) < n {
		d.scratch = make([]byte, n)
	}
	b := d.scratch[:n]
	if err := d.dec.ReadFull(b); err != nil {
		return "", err
	}
	return string(b), nil
}

// bytes reads a bin (or str) value, nil when empty.
func (d *decoder) bytes() ([]byte, error) {
	n, err := d.size()
	if err != nil || n <= 0 {
		return nil, err
	}
	b := make([]byte, n)
	return b, d.dec.ReadFull(b)
}

func (d *decoder) uint32() (uint32, error) {
	v, err := d.dec.DecodeUint64()
	if err == nil && v > math.MaxUint32 {
		err = fmt.Errorf("%d out of range", v)
	}
	return uint32(v), err
}

// skip passes over one value of a field nobody knows, whatever its type,
// without allocating: each length is checked against what is left and the
// bytes are stepped over.
func (d *decoder) skip(depth int) error {
	if depth > maxSkipDepth {
		return errDepth
	}
	c, err := d.dec.PeekCode()
	if err != nil {
		return err
	}
	switch {
	case msgpcode.IsFixedMap(c) || c == msgpcode.Map16 || c == msgpcode.Map32:
		n, err := d.mapLen()
		for i := 0; i < 2*n && err == nil; i++ {
			err = d.skip(depth + 1)
		}
		return err
	case msgpcode.IsFixedArray(c) || c == msgpcode.Array16 || c == msgpcode.Array32:
		n, err := d.dec.DecodeArrayLen()
		if err == nil && n > d.r.Len() {
			err = errLength
		}
		for i := 0; i < n && err == nil; i++ {
			err = d.skip(depth + 1)
		}
		return err
	case msgpcode.IsString(c) || msgpcode.IsBin(c):
		n, err := d.size()
		if err == nil && n > 0 {
			_, err = d.r.Seek(int64(n), io.SeekCurrent)
		}
		return err
	case msgpcode.IsExt(c):
		_, n, err := d.dec.DecodeExtHeader()
		if err == nil && n > d.r.Len() {
			err = errLength
		}
		if err == nil {
			_, err = d.r.Seek(int64(n), io.SeekCurrent)
		}
		return err
	default:
		// nil, a bool or a number: a few bytes, read into the decoder's
		// own small buffer.
		return d.dec.Skip()
	}
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
