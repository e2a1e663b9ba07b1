package wire

import (
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"time"
)

// ErrInvalidMessage wraps every failure to decode a message. Its text
// begins the error message the coordinator sends back to the node.
var ErrInvalidMessage = errors.New("invalid message")

// Envelope is the frame every message travels in, one per WebSocket text
// frame. Only msg_type is required; unknown fields are ignored. Payload is
// decoded later, by type.
type Envelope struct {
	MsgID     string          `json:"msg_id"`
	MsgType   MsgType         `json:"msg_type"`
	Payload   json.RawMessage `json:"payload"`
	SenderID  string          `json:"sender_id"`
	Timestamp string          `json:"timestamp"`
}

// emptyObject is the payload of an envelope that had none.
var emptyObject = json.RawMessage("{}")

// ParseEnvelope reads one frame as the Go SDK reads the coordinator's: only
// msg_type is required, an absent or null payload reads as {}, and a
// payload of another kind is kept, to fail when its type decodes it
// (DecodePayload).
func ParseEnvelope(b []byte) (Envelope, error) { return Standard.ParseEnvelope(b) }

// ParseEnvelope is the package's ParseEnvelope with cd's JSON decoder.
func (cd Codec) ParseEnvelope(b []byte) (Envelope, error) {
	var e Envelope
	if err := CheckBounds(b); err != nil {
		return Envelope{}, fmt.Errorf("%w: %w", ErrInvalidMessage, err)
	}
	if err := cd.unmarshal(b, &e); err != nil {
		return Envelope{}, fmt.Errorf("%w: not a JSON envelope: %s", ErrInvalidMessage, DescribeJSONError(err))
	}
	if e.MsgType == "" {
		return Envelope{}, fmt.Errorf("%w: msg_type is missing", ErrInvalidMessage)
	}
	// encoding/json hands a RawMessage its value without the whitespace
	// around it, so "null" is the only spelling of null here.
	if len(e.Payload) == 0 || string(e.Payload) == "null" {
		e.Payload = emptyObject
	}
	return e, nil
}

// DecodeEnvelope reads one frame as the coordinator reads a node's: as
// ParseEnvelope, and a payload that is not a JSON object is refused
// (docs/PROTOCOL.md), so that each type's decoder is given an object.
func DecodeEnvelope(b []byte) (Envelope, error) { return Standard.DecodeEnvelope(b) }

// DecodeEnvelope is the package's DecodeEnvelope with cd's JSON decoder.
func (cd Codec) DecodeEnvelope(b []byte) (Envelope, error) {
	e, err := cd.ParseEnvelope(b)
	if err != nil {
		return Envelope{}, err
	}
	if e.Payload[0] != '{' {
		return Envelope{}, fmt.Errorf("%w: payload must be an object", ErrInvalidMessage)
	}
	return e, nil
}

// DecodePayload decodes the envelope's payload into v by encoding/json's
// rules (unknown fields ignored, a field of the wrong type an error).
func (e Envelope) DecodePayload(v any) error {
	if err := json.Unmarshal(e.Payload, v); err != nil {
		return fmt.Errorf("%w: %s payload: %w", ErrInvalidMessage, e.MsgType, err)
	}
	return nil
}

// outEnvelope is Envelope with the payload not yet encoded, so that a
// message is marshalled in one pass.
type outEnvelope struct {
	MsgID     string  `json:"msg_id"`
	MsgType   MsgType `json:"msg_type"`
	Payload   any     `json:"payload"`
	SenderID  string  `json:"sender_id"`
	Timestamp string  `json:"timestamp"`
}

// Encode builds a message of type t around payload, which must marshal to
// a JSON object: a fresh envelope with a random (v4 UUID) msg_id, an empty
// sender_id and the time now.
func Encode(t MsgType, payload any) ([]byte, error) { return Standard.Encode(t, payload) }

// Encode is the package's Encode with cd's JSON encoder.
func (cd Codec) Encode(t MsgType, payload any) ([]byte, error) {
	var ts [32]byte
	b, err := cd.marshal(outEnvelope{
		MsgID:     newMsgID(),
		MsgType:   t,
		Payload:   payload,
		Timestamp: string(AppendTimestamp(ts[:0], time.Now())),
	})
	if err != nil {
		return nil, fmt.Errorf("wire: encode %s: %w", t, err)
	}
	return b, nil
}

// MustEncode is Encode for a payload that cannot fail to marshal (the
// coordinator's own, built from values it has checked): a failure is a bug,
// and it panics.
func MustEncode(t MsgType, payload any) []byte { return Standard.MustEncode(t, payload) }

// MustEncode is the package's MustEncode with cd's JSON encoder.
func (cd Codec) MustEncode(t MsgType, payload any) []byte {
	b, err := cd.Encode(t, payload)
	if err != nil {
		panic(err)
	}
	return b
}

// newMsgID returns a random (version 4) UUID.
func newMsgID() string {
	var u [16]byte
	_, _ = rand.Read(u[:]) // crypto/rand.Read never fails
	u[6] = u[6]&0x0f | 0x40
	u[8] = u[8]&0x3f | 0x80
	var s [36]byte
	hex.Encode(s[0:8], u[0:4])
	s[8] = '-'
	hex.Encode(s[9:13], u[4:6])
	s[13] = '-'
	hex.Encode(s[14:18], u[6:8])
	s[18] = '-'
	hex.Encode(s[19:23], u[8:10])
	s[23] = '-'
	hex.Encode(s[24:], u[10:])
	return string(s[:])
}
