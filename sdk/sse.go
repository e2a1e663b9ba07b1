package sdk

import (
	"bufio"
	"bytes"
	"errors"
	"io"
)

// maxEventBytes bounds one SSE event. A done event carries the whole result
// (up to the server's 1 MiB cap), which JSON escaping may grow several-fold.
const maxEventBytes = 32 << 20

var errEventTooLarge = errors.New("sdk: stream event exceeds 32 MiB")

// sseReader reads the data of server-sent events: "data:" lines (joined by
// newlines when there are several) up to a blank line. Comments (":…", used
// as keep-alives) and other fields (event, id, retry) are skipped.
type sseReader struct {
	r *bufio.Reader
}

func newSSEReader(r io.Reader) *sseReader {
	return &sseReader{r: bufio.NewReaderSize(r, 64<<10)}
}

// next returns the next event's data. At the end of the stream it returns
// io.EOF; an event cut short by the end is still returned, so that its
// (probably broken) JSON rather than silence reports the problem.
func (s *sseReader) next() ([]byte, error) {
	var data []byte
	has := false
	for {
		line, err := s.line()
		if err == io.EOF && has {
			return data, nil
		}
		if err != nil {
			return nil, err
		}
		if len(line) == 0 {
			if has {
				return data, nil
			}
			continue
		}
		field, value, _ := bytes.Cut(line, []byte(":"))
		if !bytes.Equal(field, []byte("data")) {
			continue // a comment (empty field) or a field we do not use
		}
		value = bytes.TrimPrefix(value, []byte(" "))
		if has {
			data = append(data, '\n')
		}
		if len(data)+len(value) > maxEventBytes {
			return nil, errEventTooLarge
		}
		data = append(data, value...)
		has = true
	}
}

// line returns the next line without its "\n" or "\r\n".
func (s *sseReader) line() ([]byte, error) {
	var line []byte
	for {
		chunk, err := s.r.ReadSlice('\n')
		if len(line)+len(chunk) > maxEventBytes {
			return nil, errEventTooLarge
		}
		line = append(line, chunk...)
		switch {
		case errors.Is(err, bufio.ErrBufferFull):
			continue
		case errors.Is(err, io.EOF) && len(line) > 0:
			return bytes.TrimSuffix(line, []byte("\r")), nil
		case err != nil:
			return nil, err
		}
		line = bytes.TrimSuffix(line, []byte("\n"))
		return bytes.TrimSuffix(line, []byte("\r")), nil
	}
}

// sseEvent is one whole event: its data and, if it had an id field, its id.
type sseEvent struct {
	id    string
	hasID bool
	data  []byte
}

// maxEventIDBytes bounds an id the reader keeps (and sends back as
// Last-Event-ID); a longer one is ignored.
const maxEventIDBytes = 256

// event returns the next whole event (one that ended with its blank line)
// that has data or an id; comments and other fields are skipped. An event
// cut short by the end of the stream is not returned, so that a resuming
// reader never takes a half-received event (or its id) for a received one:
// then it returns io.ErrUnexpectedEOF. A stream that ends between events
// returns io.EOF.
func (s *sseReader) event() (sseEvent, error) {
	var ev sseEvent
	started := false // a data or id field has been read
	for {
		line, err := s.line()
		if errors.Is(err, io.EOF) {
			if started {
				return sseEvent{}, io.ErrUnexpectedEOF
			}
			return sseEvent{}, io.EOF
		}
		if err != nil {
			return sseEvent{}, err
		}
		// A last line without its newline is taken as read, but the read
		// after it says EOF: its event is then dropped as cut.
		if len(line) == 0 {
			if started {
				return ev, nil
			}
			continue
		}
		field, value, _ := bytes.Cut(line, []byte(":"))
		value = bytes.TrimPrefix(value, []byte(" "))
		switch string(field) {
		case "data":
			if ev.data == nil {
				ev.data = []byte{} // data, even if empty
			} else {
				ev.data = append(ev.data, '\n')
			}
			if len(ev.data)+len(value) > maxEventBytes {
				return sseEvent{}, errEventTooLarge
			}
			ev.data = append(ev.data, value...)
			started = true
		case "id":
			// The SSE spec ignores an id with a NUL in it.
			if len(value) <= maxEventIDBytes && !bytes.ContainsRune(value, 0) {
				ev.id, ev.hasID = string(value), true
			}
			started = true
		}
	}
}
