package async

import (
	"encoding/json"
	"errors"
	"fmt"

	"github.com/switchyard-dev/switchyard/sdk/wire"
)

// EventKind says what an Event announces.
type EventKind string

// The events between instances.
const (
	// EventSubmitted: a task was queued; every pump that serves its type
	// looks for work.
	EventSubmitted EventKind = "submitted"
	// EventEnded: a task ended; its waiters (?wait) read it again.
	EventEnded EventKind = "ended"
	// EventCancel: a running task's cancellation was asked for; its
	// instance stops it now rather than at its next renewal.
	EventCancel EventKind = "cancel"
)

// Event is one message between the instances' pumps (JSON on the wire).
type Event struct {
	Kind     EventKind `json:"kind"`
	TaskID   string    `json:"task_id"`
	TaskType string    `json:"task_type,omitempty"` // submitted only
}

// maxEventBytes bounds an event on the wire: an id and a task type are
// far below it.
const maxEventBytes = 1024

// ErrBadEvent is the kind of every error of DecodeEvent.
var ErrBadEvent = errors.New("async: bad event")

// Encode is the event's wire form.
func (e Event) Encode() []byte {
	b, _ := json.Marshal(e) // strings only: it cannot fail
	return b
}

// DecodeEvent reads an event from the wire. Anything but a JSON object of
// a known kind with a task id, within maxEventBytes, is an ErrBadEvent.
func DecodeEvent(b []byte) (Event, error) {
	var e Event
	if len(b) > maxEventBytes {
		return e, fmt.Errorf("%w: %d bytes (at most %d)", ErrBadEvent, len(b), maxEventBytes)
	}
	if wire.CheckBounds(b) != nil || json.Unmarshal(b, &e) != nil {
		return Event{}, fmt.Errorf("%w: not a JSON object of strings", ErrBadEvent)
	}
	switch {
	case e.Kind != EventSubmitted && e.Kind != EventEnded && e.Kind != EventCancel:
		return Event{}, fmt.Errorf("%w: unknown kind %q", ErrBadEvent, e.Kind)
	case e.TaskID == "":
		return Event{}, fmt.Errorf("%w: no task_id", ErrBadEvent)
	}
	return e, nil
}
