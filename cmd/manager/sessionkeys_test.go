package main

import (
	"flag"
	"strings"
	"testing"
	"time"

	"github.com/mcpbridge/operator/internal/gateway"
	"github.com/mcpbridge/operator/internal/sessionkeys"
)

func TestSessionKeyFlags(t *testing.T) {
	for _, tc := range []struct {
		name    string
		args    []string
		wantErr string
	}{
		{"the defaults", nil, ""},
		{"hours", []string{"--gateway-session-key-rotation=6h", "--gateway-session-key-retention=48h"}, ""},
		{"a rotation too fast", []string{"--gateway-session-key-rotation=1m"}, "must be at least 10m"},
		{"a retention too short", []string{"--gateway-session-key-retention=5m"}, "must be at least 10m"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			fs := flag.NewFlagSet("manager", flag.ContinueOnError)
			var o sessionKeyOptions
			o.bindFlags(fs)
			if err := fs.Parse(tc.args); err != nil {
				t.Fatal(err)
			}
			err := o.validate()
			if tc.wantErr == "" && err != nil || tc.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tc.wantErr)) {
				t.Fatalf("validate: %v, want %q", err, tc.wantErr)
			}
		})
	}
	var o sessionKeyOptions
	o.bindFlags(flag.NewFlagSet("manager", flag.ContinueOnError))
	if o.secretName != sessionkeys.DefaultSecretName || o.rotateEvery != 24*time.Hour || o.honourFor != 7*24*time.Hour {
		t.Fatalf("defaults %+v", o)
	}
	// Outside a cluster without --manager-namespace: the gateway's own key.
	gw := &gateway.Gateway{}
	if err := addSessionKeys(nil, gw, &o, ""); err != nil || gw.SessionKeys != nil || gw.SessionMaxAge != o.honourFor {
		t.Fatalf("without the manager's namespace: %v, keys %v, max age %s", err, gw.SessionKeys, gw.SessionMaxAge)
	}
}
