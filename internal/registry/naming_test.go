package registry

import (
	"crypto/sha256"
	"fmt"
	"strings"
	"testing"
)

// publicNameTestAlphabet is the set of bytes a public name may contain.
const publicNameTestAlphabet = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789_-"

// publicNameTestNeedsHash reports, independently of naming.go, whether the
// candidate name of (serverName, rawName) must be hashed.
func publicNameTestNeedsHash(serverName, rawName string) bool {
	cand := "mcp__" + serverName + "__" + rawName
	if len(cand) > 64 {
		return true
	}
	for i := 0; i < len(cand); i++ {
		if strings.IndexByte(publicNameTestAlphabet, cand[i]) < 0 {
			return true
		}
	}
	return false
}

// publicNameTestOracle is an independent implementation of the public name,
// to check PublicName. See docs/design.md, "Tool registry and names".
func publicNameTestOracle(serverName, rawName string) string {
	cand := []byte("mcp__" + serverName + "__" + rawName)
	if !publicNameTestNeedsHash(serverName, rawName) {
		return string(cand)
	}
	for i, c := range cand {
		if strings.IndexByte(publicNameTestAlphabet, c) < 0 {
			cand[i] = '_'
		}
	}
	if len(cand) > 51 {
		cand = cand[:51]
	}
	sum := sha256.Sum256([]byte(serverName + "\x00" + rawName))
	return string(cand) + "_" + fmt.Sprintf("%x", sum)[:12]
}

func TestPublicName(t *testing.T) {
	long := strings.Repeat("x", 60)
	tests := []struct {
		name       string
		serverName string
		rawName    string
		want       string // literal expectation; empty: only the oracle is checked
		hashed     bool
	}{
		{name: "valid name is kept as is", serverName: "github", rawName: "create_issue",
			want: "mcp__github__create_issue"},
		{name: "dash and digits are valid", serverName: "fs-2", rawName: "read-file_v2",
			want: "mcp__fs-2__read-file_v2"},
		{name: "dot is replaced and hashed", serverName: "fs", rawName: "read.file",
			want: "mcp__fs__read_file_a70c27002fc8", hashed: true},
		{name: "multi-byte rune becomes one underscore per byte", serverName: "srv", rawName: "café",
			want: "mcp__srv__caf___6e9d11df5b3f", hashed: true},
		{name: "too long is truncated to 51 and hashed", serverName: "everything", rawName: long,
			want: "mcp__everything__xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx_5ea459d09532", hashed: true},
		{name: "exactly 64 characters is kept", serverName: "s", rawName: strings.Repeat("y", 56),
			want: "mcp__s__" + strings.Repeat("y", 56)},
		{name: "65 characters is hashed", serverName: "s", rawName: strings.Repeat("y", 57), hashed: true},
		{name: "SPEC example a__b + c", serverName: "a__b", rawName: "c", want: "mcp__a__b__c"},
		{name: "SPEC example a + b__c normalizes to the same name", serverName: "a", rawName: "b__c", want: "mcp__a__b__c"},
		{name: "empty raw name", serverName: "s", rawName: "", want: "mcp__s__"},
		{name: "space and slash", serverName: "web", rawName: "get /users", hashed: true},
		{name: "invalid UTF-8", serverName: "web", rawName: "a\xffb", hashed: true},
		{name: "NUL byte", serverName: "web", rawName: "a\x00b", hashed: true},
		{name: "long and invalid", serverName: "srv", rawName: strings.Repeat("é", 40), hashed: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := PublicName(tt.serverName, tt.rawName)
			if tt.want != "" && got != tt.want {
				t.Errorf("PublicName(%q, %q) = %q, want %q", tt.serverName, tt.rawName, got, tt.want)
			}
			if want := publicNameTestOracle(tt.serverName, tt.rawName); got != want {
				t.Errorf("PublicName(%q, %q) = %q, oracle says %q", tt.serverName, tt.rawName, got, want)
			}
			if hashed := publicNameTestNeedsHash(tt.serverName, tt.rawName); hashed != tt.hashed {
				t.Fatalf("test case is wrong: needs hash = %v, case says %v", hashed, tt.hashed)
			}
			if len(got) > 64 {
				t.Errorf("len(%q) = %d > 64", got, len(got))
			}
		})
	}
}

func TestPublicNameHashSeparatesNamesWithTheSamePrefix(t *testing.T) {
	long := strings.Repeat("z", 80)
	tests := []struct {
		name   string
		s1, r1 string
		s2, r2 string
	}{
		{name: "different replaced bytes", s1: "fs", r1: "read.file", s2: "fs", r2: "read,file"},
		{name: "space vs tab", s1: "fs", r1: "a b", s2: "fs", r2: "a\tb"},
		{name: "difference after the truncation point", s1: "srv", r1: long + "1", s2: "srv", r2: long + "2"},
		{name: "same raw name on two servers after truncation", s1: "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa1", r1: "t",
			s2: "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa2", r2: "t"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			n1, n2 := PublicName(tt.s1, tt.r1), PublicName(tt.s2, tt.r2)
			if n1[:len(n1)-13] != n2[:len(n2)-13] {
				t.Fatalf("test case is wrong: prefixes differ: %q vs %q", n1, n2)
			}
			if n1 == n2 {
				t.Errorf("PublicName(%q, %q) == PublicName(%q, %q) == %q", tt.s1, tt.r1, tt.s2, tt.r2, n1)
			}
		})
	}
}

// FuzzPublicName checks the invariants of the public name on arbitrary
// input (docs/design.md, "Tool registry and names"):
//
//	go test -run '^$' -fuzz FuzzPublicName -fuzztime 60s ./internal/bridge/
func FuzzPublicName(f *testing.F) {
	f.Add("github", "create_issue", "fs", "read.file")
	f.Add("a__b", "c", "a", "b__c")
	f.Add("srv", "café", "srv", "caf\xc3\xa9!")
	f.Add("everything", strings.Repeat("x", 70), "everything", strings.Repeat("x", 71))
	f.Add("", "", "-", "_")
	f.Add("s", strings.Repeat("y", 56), "s", strings.Repeat("y", 57))
	f.Add("web", "a\x00b", "web", "a\xffb")
	f.Fuzz(func(t *testing.T, s1, r1, s2, r2 string) {
		pairs := [][2]string{{s1, r1}, {s2, r2}, {s1, r1 + "."}, {s1 + ".", r1}}
		names := make([]string, len(pairs))
		for i, p := range pairs {
			got := PublicName(p[0], p[1])
			names[i] = got
			if len(got) > 64 {
				t.Fatalf("PublicName(%q, %q) = %q: %d bytes > 64", p[0], p[1], got, len(got))
			}
			for j := 0; j < len(got); j++ {
				if strings.IndexByte(publicNameTestAlphabet, got[j]) < 0 {
					t.Fatalf("PublicName(%q, %q) = %q: byte %d (%q) outside [A-Za-z0-9_-]", p[0], p[1], got, j, got[j])
				}
			}
			if again := PublicName(p[0], p[1]); again != got {
				t.Fatalf("PublicName(%q, %q) not deterministic: %q then %q", p[0], p[1], got, again)
			}
			if want := publicNameTestOracle(p[0], p[1]); got != want {
				t.Fatalf("PublicName(%q, %q) = %q, oracle says %q", p[0], p[1], got, want)
			}
		}
		// Distinct pairs that both need hashing get distinct names. The
		// hash input serverName+NUL+rawName is only unambiguous when
		// serverName has no NUL, which a valid serverName never has.
		for i := range pairs {
			for j := i + 1; j < len(pairs); j++ {
				a, b := pairs[i], pairs[j]
				if a == b || strings.IndexByte(a[0], 0) >= 0 || strings.IndexByte(b[0], 0) >= 0 {
					continue
				}
				if !publicNameTestNeedsHash(a[0], a[1]) || !publicNameTestNeedsHash(b[0], b[1]) {
					continue
				}
				if names[i] == names[j] {
					t.Fatalf("PublicName(%q, %q) == PublicName(%q, %q) == %q", a[0], a[1], b[0], b[1], names[i])
				}
			}
		}
	})
}
