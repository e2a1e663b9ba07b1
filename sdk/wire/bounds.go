package wire

import (
	"errors"
	"fmt"
)

// The bounds of the JSON that crosses a network into switchyard: node
// frames, HTTP bodies and the control messages on the bus. No message of
// the protocol or the API nests past a dozen levels (params may not pass
// 4) or lists more than a few thousand items (2,048 embedding inputs, 500
// chat messages).
const (
	MaxDepth    = 64
	MaxElements = 10_000 // in one array, or members in one object
)

// ErrOutOfBounds is the kind of CheckBounds's errors.
var ErrOutOfBounds = errors.New("JSON out of bounds")

// CheckBounds refuses b when its arrays and objects nest deeper than
// MaxDepth or one of them holds more than MaxElements, before any decoder
// sees it (invariant 16).
//
// Depth, because the decoders the coordinator uses recurse once per level
// on the goroutine's stack, which grows to fit: a 2 MB body of 990,000 '['
// took 512 MiB of stack in segmentio/encoding/json and held it until the
// next collection (encoding/json stops at 10,000 levels). Width, because a
// decoder spends tens of bytes on each element it reads into a slice or a
// map, and hundreds on each one of the wrong type when encoding/json
// reads on to report the first (a megabyte of "0," into a list of
// messages allocated 141 bytes a byte).
//
// It judges shape only: brackets and commas inside strings do not count,
// and malformed JSON within the bounds is left to the decoder to refuse. A
// quote after an odd run of backslashes is inside its string, as in every
// JSON string; a string left open hides the rest of b, which no decoder
// accepts either. It allocates nothing and recurses nowhere.
func CheckBounds(b []byte) error { return checkBounds(b, MaxDepth, MaxElements) }

func checkBounds(b []byte, maxDepth, maxElems int) error {
	var commas [MaxDepth + 1]int // per open container; maxDepth <= MaxDepth
	maxDepth = min(maxDepth, MaxDepth)
	depth := 0
	for i := 0; i < len(b); i++ {
		switch b[i] {
		case '"':
			end, err := SkipString(b, i)
			if err != nil {
				return nil // left open: the rest is a string
			}
			i = end - 1
		case '[', '{':
			if depth++; depth > maxDepth {
				return fmt.Errorf("%w: nests deeper than %d levels", ErrOutOfBounds, maxDepth)
			}
			commas[depth] = 0
		case ']', '}':
			depth = max(depth-1, 0)
		case ',':
			if depth > 0 {
				if commas[depth]++; commas[depth] >= maxElems {
					return fmt.Errorf("%w: has an array or object of more than %d items", ErrOutOfBounds, maxElems)
				}
			}
		}
	}
	return nil
}
