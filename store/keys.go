package store

import (
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"strings"

	"github.com/google/uuid"
)

// API keys follow GemmaNet's shape so its SDKs accept them: "gn_" and 32
// lowercase hex characters (128 random bits).
const (
	keyPrefix    = "gn_"
	keyHexLen    = 32
	keyLen       = len(keyPrefix) + keyHexLen
	keyPrefixLen = len(keyPrefix) + 8 // what APIKey.Prefix shows
)

// newKey returns a fresh key, its stored hash and its display prefix.
func newKey() (key, hash, prefix string, err error) {
	b := make([]byte, keyHexLen/2)
	if _, err := rand.Read(b); err != nil {
		return "", "", "", fmt.Errorf("store: generate API key: %w", err)
	}
	key = keyPrefix + hex.EncodeToString(b)
	return key, hashKey(key), key[:keyPrefixLen], nil
}

// newKeyID returns a key's public identifier ("key_" + 12 hex), which is
// unrelated to the key's bits so that it can be shown and logged freely.
func newKeyID() (string, error) {
	b := make([]byte, 6)
	if _, err := rand.Read(b); err != nil {
		return "", fmt.Errorf("store: generate key id: %w", err)
	}
	return "key_" + hex.EncodeToString(b), nil
}

func newAccountID() string { return uuid.NewString() }

// hashKey is what the database holds instead of the key. A plain SHA-256 is
// enough: the key has 128 random bits, so there is nothing to brute-force.
func hashKey(key string) string {
	sum := sha256.Sum256([]byte(key))
	return hex.EncodeToString(sum[:])
}

// looksLikeKey reports whether s has the shape of a key this package issues,
// so that Authenticate can turn garbage away without a database round trip.
func looksLikeKey(s string) bool {
	if len(s) != keyLen || !strings.HasPrefix(s, keyPrefix) {
		return false
	}
	for _, c := range s[len(keyPrefix):] {
		if (c < '0' || c > '9') && (c < 'a' || c > 'f') {
			return false
		}
	}
	return true
}

// normTrust fills the default tier and refuses unknown ones.
func normTrust(trust string) (string, error) {
	switch trust {
	case "":
		return TrustCommunity, nil
	case TrustCommunity, TrustOfficial:
		return trust, nil
	}
	return "", fmt.Errorf("store: trust %q is not %q or %q: %w", trust, TrustCommunity, TrustOfficial, ErrInvalid)
}
