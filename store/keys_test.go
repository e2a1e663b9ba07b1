package store

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"strings"
	"testing"
	"time"
)

func TestNewKey(t *testing.T) {
	seen := map[string]bool{}
	for range 100 {
		key, hash, prefix, err := newKey()
		if err != nil {
			t.Fatal(err)
		}
		if !looksLikeKey(key) {
			t.Fatalf("newKey made %q, which looksLikeKey refuses", key)
		}
		sum := sha256.Sum256([]byte(key))
		if hash != hex.EncodeToString(sum[:]) {
			t.Fatalf("hash of %s is not its hex SHA-256", prefix)
		}
		if prefix != key[:11] || !strings.HasPrefix(prefix, "gn_") {
			t.Fatalf("prefix %q of %q", prefix, key)
		}
		if seen[key] {
			t.Fatal("newKey repeated a key")
		}
		seen[key] = true
	}
}

func TestLooksLikeKey(t *testing.T) {
	good := "gn_0123456789abcdef0123456789abcdef"
	if !looksLikeKey(good) {
		t.Errorf("looksLikeKey(%q) = false", good)
	}
	for _, bad := range []string{"", "gn_", good[:34], good + "0", "GN_" + good[3:], "gn_0123456789ABCDEF0123456789abcdef", "gn_0123456789abcdeg0123456789abcdef", "xx_0123456789abcdef0123456789abcdef"} {
		if looksLikeKey(bad) {
			t.Errorf("looksLikeKey(%q) = true", bad)
		}
	}
}

func TestOneKey(t *testing.T) {
	if err := oneKey("gn_1234abcd", nil); !errors.Is(err, ErrNotFound) {
		t.Errorf("no match: %v, want ErrNotFound", err)
	}
	if err := oneKey("gn_1234abcd", []string{"key_1"}); err != nil {
		t.Errorf("one match: %v", err)
	}
	err := oneKey("gn_1234abcd", []string{"key_1", "key_2"})
	if !errors.Is(err, ErrConflict) || !strings.Contains(err.Error(), "key id") {
		t.Errorf("two matches: %v, want ErrConflict telling to use the key id", err)
	}
}

func TestCleanText(t *testing.T) {
	for in, want := range map[string]string{
		"plain":        "plain",
		"héllo":        "héllo",
		"a\x00b":       "ab",
		"bad\xffutf8":  "bad\uFFFDutf8",
		"\x00\xfe\x00": "\uFFFD",
	} {
		if got := cleanText(in); got != want {
			t.Errorf("cleanText(%q) = %q, want %q", in, got, want)
		}
	}
}

func TestBackoff(t *testing.T) {
	base := 200 * time.Millisecond
	for failures := 1; failures <= 40; failures++ {
		want := maxBackoff
		if failures <= 6 {
			want = base << (failures - 1) // 200ms, 400ms, ... 6.4s
		}
		for range 50 {
			d := backoff(base, failures)
			if lo, hi := time.Duration(float64(want)*0.8), time.Duration(float64(want)*1.2); d < lo || d > hi {
				t.Fatalf("backoff after %d failures = %v, want within [%v, %v]", failures, d, lo, hi)
			}
		}
	}
}

// What a key may do follows from its use and task types alone; a spending
// limit restricts what it spends, not what it may do.
func TestKeyLimitsScope(t *testing.T) {
	for _, c := range []struct {
		name                         string
		l                            KeyLimits
		request, serve, unrestricted bool
	}{
		{"no limits", KeyLimits{}, true, true, true},
		{"a budget", KeyLimits{BudgetPerMonth: 10, TokensPerDay: 5}, true, true, true},
		{"node", KeyLimits{Use: KeyUseNode}, false, true, false},
		{"client", KeyLimits{Use: KeyUseClient}, true, false, false},
		{"client with task types", KeyLimits{Use: KeyUseClient, TaskTypes: []string{"chat"}}, true, false, false},
		{"task types alone", KeyLimits{TaskTypes: []string{"chat"}}, true, true, false},
	} {
		if got := c.l.MayRequest(); got != c.request {
			t.Errorf("%s: MayRequest %v, want %v", c.name, got, c.request)
		}
		if got := c.l.MayServe(); got != c.serve {
			t.Errorf("%s: MayServe %v, want %v", c.name, got, c.serve)
		}
		if got := c.l.Unrestricted(); got != c.unrestricted {
			t.Errorf("%s: Unrestricted %v, want %v", c.name, got, c.unrestricted)
		}
	}
}
