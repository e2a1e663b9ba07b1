package nodes

import (
	"encoding/json"
	"errors"
	"fmt"
	"regexp"
	"strconv"
	"strings"
	"unicode"
	"unicode/utf8"

	"github.com/google/uuid"

	"github.com/switchyard-dev/switchyard/sdk/wire"
)

// Limits of node_register: the coordinator's rules (docs/PROTOCOL.md).
const (
	maxAPIKeyChars     = 128
	maxNameChars       = 64
	maxCapabilities    = 32
	maxLanguages       = 64
	maxLanguageChars   = 16
	maxModelInfoChars  = 2048
	maxModelInfoBytes  = 12 * maxModelInfoChars // a character as sent: at most 12 bytes (an escaped surrogate pair)
	maxModelInfoValues = 512
	maxFeatures        = 32
	maxFeatureChars    = 64
	MaxNodeConcurrency = 1024 // the largest max_concurrency a node may declare
	maxVersionChars    = 64
	MaxLabels          = 16  // labels a node may declare, and a request require
	MaxLabelValueChars = 128 // the longest label value
)

var capabilityRE = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$`)

// LabelKeyRE is what a label's key must match, on a node and in a request.
var LabelKeyRE = regexp.MustCompile(`^[a-z0-9][a-z0-9_.-]{0,62}$`)

// CheckLabels reports what is wrong with labels, naming field (the JSON
// field that holds them) and the rule broken; nil when they are fine.
func CheckLabels(field string, labels map[string]string) error {
	if len(labels) > MaxLabels {
		return fmt.Errorf("%s has more than %d labels", field, MaxLabels)
	}
	for k, v := range labels {
		if !LabelKeyRE.MatchString(k) {
			return fmt.Errorf("%s: key %q must match %s", field, truncate(k, 80), LabelKeyRE)
		}
		if n := utf8.RuneCountInString(v); n == 0 || n > MaxLabelValueChars {
			return fmt.Errorf("%s: the value of %q must be 1-%d characters", field, k, MaxLabelValueChars)
		}
		if !displayable(v) {
			return fmt.Errorf("%s: the value of %q must not contain control, format or bidirectional-override characters", field, k)
		}
	}
	return nil
}

// Registration is a validated node_register.
type Registration struct {
	APIKey         string
	Name           string
	Capabilities   []string
	Languages      []string
	ModelInfo      json.RawMessage // a JSON object
	MaxConcurrency int             // 0 when the node did not say
	TaskCancel     bool            // it declared wire.FeatureTaskCancel
	Resume         bool            // it declared wire.FeatureResume
	Version        string          // "" when the node did not say
	Labels         map[string]string
}

// DecodeRegister decodes and validates a node_register payload. Its error
// text is sent to the node, so it names the field and the rule.
func DecodeRegister(p json.RawMessage) (Registration, error) {
	// The lists are counted before they are decoded: node_register is
	// read before its key is checked, and a list item a decoder spends 16
	// bytes and more on takes 3 ("",) to send.
	var raw struct {
		APIKey         *string         `json:"api_key"`
		Name           *string         `json:"name"`
		Capabilities   json.RawMessage `json:"capabilities"`
		Languages      json.RawMessage `json:"languages"`
		ModelInfo      json.RawMessage `json:"model_info"`
		MaxConcurrency json.RawMessage `json:"max_concurrency"`
		Features       json.RawMessage `json:"features"`
		Version        string          `json:"version"`
		Labels         json.RawMessage `json:"labels"`
	}
	var r Registration
	if err := json.Unmarshal(p, &raw); err != nil {
		return r, fmt.Errorf("%w: %s", wire.ErrInvalidMessage, wire.DescribeJSONError(err))
	}
	var capabilities, languages, features []string
	var labels map[string]string
	for _, l := range []struct {
		name  string
		raw   json.RawMessage
		limit int
		what  string
		into  any
	}{{"capabilities", raw.Capabilities, maxCapabilities, "items", &capabilities}, {"languages", raw.Languages, maxLanguages, "items", &languages},
		{"features", raw.Features, maxFeatures, "items", &features}, {"labels", raw.Labels, MaxLabels, "labels", &labels}} {
		if wire.CountItems(l.raw, l.limit) > l.limit {
			return r, fmt.Errorf("%w: %s has more than %d %s", wire.ErrInvalidMessage, l.name, l.limit, l.what)
		}
		if err := decodeField(l.name, l.raw, l.into); err != nil {
			return r, err
		}
	}
	switch {
	case raw.APIKey == nil || *raw.APIKey == "":
		return r, fmt.Errorf("%w: api_key is required", wire.ErrInvalidMessage)
	case utf8.RuneCountInString(*raw.APIKey) > maxAPIKeyChars:
		return r, fmt.Errorf("%w: api_key is longer than %d characters", wire.ErrInvalidMessage, maxAPIKeyChars)
	case raw.Name == nil || *raw.Name == "":
		return r, fmt.Errorf("%w: name is required", wire.ErrInvalidMessage)
	case utf8.RuneCountInString(*raw.Name) > maxNameChars:
		return r, fmt.Errorf("%w: name is longer than %d characters", wire.ErrInvalidMessage, maxNameChars)
	case !displayable(*raw.Name):
		return r, fmt.Errorf("%w: name must not contain control, format or bidirectional-override characters", wire.ErrInvalidMessage)
	case len(capabilities) == 0:
		return r, fmt.Errorf("%w: capabilities must list at least one capability", wire.ErrInvalidMessage)
	case len(capabilities) > maxCapabilities:
		return r, fmt.Errorf("%w: capabilities has more than %d items", wire.ErrInvalidMessage, maxCapabilities)
	case len(languages) > maxLanguages:
		return r, fmt.Errorf("%w: languages has more than %d items", wire.ErrInvalidMessage, maxLanguages)
	case len(features) > maxFeatures:
		return r, fmt.Errorf("%w: features has more than %d items", wire.ErrInvalidMessage, maxFeatures)
	case utf8.RuneCountInString(raw.Version) > maxVersionChars:
		return r, fmt.Errorf("%w: version is longer than %d characters", wire.ErrInvalidMessage, maxVersionChars)
	case !displayable(raw.Version):
		return r, fmt.Errorf("%w: version must not contain control, format or bidirectional-override characters", wire.ErrInvalidMessage)
	}
	if err := CheckLabels("labels", labels); err != nil {
		return r, fmt.Errorf("%w: %s", wire.ErrInvalidMessage, err)
	}
	for _, f := range features {
		if n := utf8.RuneCountInString(f); n == 0 || n > maxFeatureChars {
			return r, fmt.Errorf("%w: each feature must be 1-%d characters", wire.ErrInvalidMessage, maxFeatureChars)
		}
		switch f {
		case wire.FeatureTaskCancel:
			r.TaskCancel = true
		case wire.FeatureResume:
			r.Resume = true
		}
	}
	for _, c := range capabilities {
		if !capabilityRE.MatchString(c) {
			return r, fmt.Errorf("%w: capability %q must match %s", wire.ErrInvalidMessage, truncate(c, 80), capabilityRE)
		}
	}
	for _, l := range languages {
		if n := utf8.RuneCountInString(l); n == 0 || n > maxLanguageChars {
			return r, fmt.Errorf("%w: each language must be 1-%d characters", wire.ErrInvalidMessage, maxLanguageChars)
		}
		if !displayable(l) {
			return r, fmt.Errorf("%w: languages must not contain control, format or bidirectional-override characters", wire.ErrInvalidMessage)
		}
	}
	info := raw.ModelInfo
	if len(info) == 0 || string(info) == "null" {
		info = json.RawMessage("{}")
	}
	if info[0] != '{' {
		return r, fmt.Errorf("%w: model_info must be an object", wire.ErrInvalidMessage)
	}
	// compactJSON decodes it whole into Go values, 30-100 bytes for each
	// value a hostile list writes in 2 or 3: a model_info within its 2,048
	// characters has fewer than maxModelInfoValues values, and fewer than
	// maxModelInfoBytes bytes as sent even with every character escaped.
	if len(info) > maxModelInfoBytes || wire.CountAll(info, maxModelInfoValues) > maxModelInfoValues {
		return r, fmt.Errorf("%w: model_info is longer than %d characters as JSON", wire.ErrInvalidMessage, maxModelInfoChars)
	}
	// Measured compactly, as GemmaNet measures its serialised form.
	compact, err := compactJSON(info)
	if err != nil {
		return r, fmt.Errorf("%w: model_info: %s", wire.ErrInvalidMessage, wire.DescribeJSONError(err))
	}
	if utf8.RuneCount(compact) > maxModelInfoChars {
		return r, fmt.Errorf("%w: model_info is longer than %d characters as JSON", wire.ErrInvalidMessage, maxModelInfoChars)
	}
	if mc := raw.MaxConcurrency; len(mc) > 0 && string(mc) != "null" {
		// Parsed from the raw JSON: a json.Number field would also take the
		// string "8", which the rule (an integer) does not allow.
		n, err := strconv.ParseInt(string(mc), 10, 64)
		if err != nil || n < 1 || n > MaxNodeConcurrency {
			return r, fmt.Errorf("%w: max_concurrency must be an integer from 1 to %d", wire.ErrInvalidMessage, MaxNodeConcurrency)
		}
		r.MaxConcurrency = int(n)
	}
	r.APIKey, r.Name = *raw.APIKey, *raw.Name
	r.Capabilities = dedupe(capabilities)
	r.Languages = languages
	if r.Languages == nil {
		r.Languages = []string{}
	}
	r.ModelInfo = compact
	r.Version = raw.Version
	if len(labels) > 0 {
		r.Labels = labels
	}
	return r, nil
}

// decodeField decodes a field of node_register, raw, into v (absent or
// null: left alone), its type errors named for the field as they were
// when it was decoded with the rest.
func decodeField(name string, raw json.RawMessage, v any) error {
	if len(raw) == 0 || string(raw) == "null" {
		return nil
	}
	err := json.Unmarshal(raw, v)
	if te, ok := errors.AsType[*json.UnmarshalTypeError](err); ok {
		te.Field = strings.TrimSuffix(name+"."+te.Field, ".")
	}
	if err != nil {
		return fmt.Errorf("%w: %s", wire.ErrInvalidMessage, wire.DescribeJSONError(err))
	}
	return nil
}

// displayable reports whether s is free of the characters that make a
// name read as something else where it is shown (/api/v1/nodes, the
// leaderboard, logs, terminals): controls (Cc: NUL, ESC, newlines), line and
// paragraph separators, and format characters (Cf: the bidirectional
// overrides and isolates U+202A–U+202E and U+2066–U+2069, zero-width
// spaces, BOM). The zero-width joiner is allowed: emoji sequences need it.
// Such names are refused, not cleaned: the node id is derived from the name,
// and two names that clean to one would share an identity.
func displayable(s string) bool {
	for _, r := range s {
		if r == '\u200d' {
			continue
		}
		if unicode.In(r, unicode.Cc, unicode.Cf, unicode.Zl, unicode.Zp) {
			return false
		}
	}
	return true
}

func compactJSON(b []byte) ([]byte, error) {
	var v map[string]any
	if err := json.Unmarshal(b, &v); err != nil {
		return nil, err
	}
	return json.Marshal(v)
}

func dedupe(in []string) []string {
	out := in[:0:0]
	seen := make(map[string]bool, len(in))
	for _, s := range in {
		if !seen[s] {
			seen[s] = true
			out = append(out, s)
		}
	}
	return out
}

func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "…"
}

// nodeIDNamespace is GemmaNet's: uuid5(NAMESPACE_URL, "https://gemmanet.net/node"),
// so a node keeps its id when it moves from GemmaNet to switchyard.
var nodeIDNamespace = uuid.NewSHA1(uuid.NameSpaceURL, []byte("https://gemmanet.net/node"))

// NodeID derives a node's id from its account and name: stable across
// reconnects, distinct between accounts.
func NodeID(accountID, name string) string {
	return uuid.NewSHA1(nodeIDNamespace, []byte(accountID+"/"+name)).String()
}
