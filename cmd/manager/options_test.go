package main

import (
	"flag"
	"io"
	"strings"
	"testing"
)

func TestEveryOperationsFlagIsDefined(t *testing.T) {
	fs := flag.NewFlagSet("manager", flag.ContinueOnError)
	if _, err := parseOptions(fs, nil); err != nil {
		t.Fatalf("defaults must be valid: %v", err)
	}
	for _, name := range []string{
		"metrics-bind-address", "health-probe-bind-address", "leader-elect",
		"gateway-bind-address", "gateway-auth", "watch-namespaces",
		"zap-devel", "zap-encoder", "zap-log-level", "zap-stacktrace-level", "zap-time-encoding",
	} {
		if fs.Lookup(name) == nil {
			t.Errorf("flag --%s is missing", name)
		}
	}
}

func TestGatewayAuthNoneNeedsLoopback(t *testing.T) {
	cases := []struct {
		args    []string
		wantErr string
	}{
		{[]string{"--gateway-auth=none", "--gateway-bind-address=127.0.0.1:8090"}, ""},
		{[]string{"--gateway-auth=none", "--gateway-bind-address=[::1]:8090"}, ""},
		{[]string{"--gateway-auth=none", "--gateway-bind-address=localhost:8090"}, ""},
		{[]string{"--gateway-auth=none"}, "loopback"},
		{[]string{"--gateway-auth=none", "--gateway-bind-address=0.0.0.0:8090"}, "loopback"},
		{[]string{"--gateway-auth=none", "--gateway-bind-address=10.0.0.1:8090"}, "loopback"},
		{[]string{"--gateway-auth=token", "--gateway-bind-address=0.0.0.0:8090"}, ""},
		{[]string{"--gateway-auth=basic"}, "must be"},
	}
	for _, tc := range cases {
		t.Run(strings.Join(tc.args, " "), func(t *testing.T) {
			fs := flag.NewFlagSet("manager", flag.ContinueOnError)
			fs.SetOutput(io.Discard)
			_, err := parseOptions(fs, tc.args)
			switch {
			case tc.wantErr == "" && err != nil:
				t.Fatalf("unexpected error: %v", err)
			case tc.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tc.wantErr)):
				t.Fatalf("error = %v, want one containing %q", err, tc.wantErr)
			}
		})
	}
}

func TestWatchNamespacesSplitsAndTrims(t *testing.T) {
	fs := flag.NewFlagSet("manager", flag.ContinueOnError)
	o, err := parseOptions(fs, []string{"--watch-namespaces= a, b ,,c"})
	if err != nil {
		t.Fatal(err)
	}
	if got := strings.Join(o.watchNamespaces, "|"); got != "a|b|c" {
		t.Fatalf("namespaces = %q", got)
	}
}
