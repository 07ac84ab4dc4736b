package main

import (
	"os"
	"path/filepath"
	"testing"
)

func TestParseMemoryLimit(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want int64
		ok   bool
	}{
		{"536870912\n", 536870912, true},
		{"max\n", 0, false},
		{"9223372036854771712\n", 0, false}, // v1 without a limit
		{"0", 0, false},
		{"", 0, false},
	} {
		got, ok := parseMemoryLimit(tc.in)
		if got != tc.want || ok != tc.ok {
			t.Errorf("parseMemoryLimit(%q) = %d, %v; want %d, %v", tc.in, got, ok, tc.want, tc.ok)
		}
	}
}

func TestCgroupMemoryLimitReadsTheFirstFileThatExists(t *testing.T) {
	dir := t.TempDir()
	v1 := filepath.Join(dir, "limit_in_bytes")
	if err := os.WriteFile(v1, []byte("268435456\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	got, file, ok := cgroupMemoryLimit([]string{filepath.Join(dir, "memory.max"), v1})
	if !ok || got != 268435456 || file != v1 {
		t.Errorf("got %d from %q (%v), want 268435456 from %q", got, file, ok, v1)
	}
	if _, _, ok := cgroupMemoryLimit([]string{filepath.Join(dir, "none")}); ok {
		t.Error("a limit found where no file exists")
	}
}
