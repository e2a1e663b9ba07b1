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
