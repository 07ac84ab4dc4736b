package registry

import (
	"crypto/sha256"
	"encoding/hex"
)

// Limits of the public tool name.
// See docs/design.md, "Tool registry and names".
const (
	// publicNameMaxLen is the longest public name; longer candidates are hashed.
	publicNameMaxLen = 64
	// publicNameKeepLen is how much of a hashed candidate is kept before the suffix.
	publicNameKeepLen = 51
	// publicNameHashHexLen is the number of hex digits of SHA-256 in the suffix.
	publicNameHashHexLen = 12
)

// PublicName returns the name under which the tool rawName of the server
// serverName is published by the gateway.
//
// The candidate is "mcp__" + serverName + "__" + rawName. Every byte outside
// [A-Za-z0-9_-] is replaced with '_'. The unit is the byte, not the rune: a
// multi-byte UTF-8 character becomes one '_' per byte, and invalid UTF-8 is
// handled the same way, so the result is always ASCII and its length in bytes
// equals its length in characters. If a replacement happened or the candidate
// is longer than 64 bytes, it is cut to its first 51 bytes and "_" plus the
// first 12 hex digits of SHA-256(serverName + "\x00" + rawName) is appended,
// giving at most 64 bytes. Otherwise the candidate is returned unchanged.
//
// PublicName is a pure function. Two different pairs can still produce the
// same name (serverName "a__b" + "c" and serverName "a" + "b__c"); the
// registry refuses the second registration. The NUL separator in the hash
// input is unambiguous because a valid serverName (^[A-Za-z0-9_-]{1,32}$)
// never contains NUL.
// See docs/design.md, "Tool registry and names".
func PublicName(serverName, rawName string) string {
	total := len("mcp__") + len(serverName) + len("__") + len(rawName)
	// Only the first publicNameMaxLen bytes can end up in the result; the
	// rest is only scanned for bytes that need replacing.
	buf := make([]byte, 0, min(total, publicNameMaxLen))
	changed := false
	add := func(s string) {
		for i := 0; i < len(s); i++ {
			c := s[i]
			if !publicNameByteOK(c) {
				c = '_'
				changed = true
			}
			if len(buf) < publicNameMaxLen {
				buf = append(buf, c)
			}
		}
	}
	add("mcp__")
	add(serverName)
	add("__")
	add(rawName)

	if !changed && total <= publicNameMaxLen {
		return string(buf)
	}
	if len(buf) > publicNameKeepLen {
		buf = buf[:publicNameKeepLen]
	}
	h := sha256.New()
	h.Write([]byte(serverName))
	h.Write([]byte{0})
	h.Write([]byte(rawName))
	sum := h.Sum(nil)
	return string(buf) + "_" + hex.EncodeToString(sum)[:publicNameHashHexLen]
}

// publicNameByteOK reports whether c may appear in a public name unchanged.
func publicNameByteOK(c byte) bool {
	return c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '_' || c == '-'
}
