package controller

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"

	"github.com/mcpbridge/operator/api/v1alpha1"
	"github.com/mcpbridge/operator/internal/bridge"
)

func TestStatusToolsCapsCountAndBytes(t *testing.T) {
	tools := func(n, rawLen int) []bridge.Tool {
		out := make([]bridge.Tool, n)
		for i := range out {
			raw := fmt.Sprintf("%0*d", rawLen, i)
			out[i] = bridge.Tool{Name: bridge.PublicName("srv", raw), RawName: raw}
		}
		return out
	}
	cases := []struct {
		name          string
		tools         []bridge.Tool
		wantLen       int
		wantTruncated bool
	}{
		{"none", nil, 0, false},
		{"a few", tools(3, 8), 3, false},
		{"exactly the cap", tools(v1alpha1.MaxStatusTools, 8), v1alpha1.MaxStatusTools, false},
		{"one past the cap", tools(v1alpha1.MaxStatusTools+1, 8), v1alpha1.MaxStatusTools, true},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			got, truncated := statusTools(tc.tools)
			if len(got) != tc.wantLen || truncated != tc.wantTruncated {
				t.Fatalf("len %d truncated %v, want %d %v", len(got), truncated, tc.wantLen, tc.wantTruncated)
			}
		})
	}
	t.Run("long raw names stay under 64 KiB of status", func(t *testing.T) {
		obj := &v1alpha1.McpServer{}
		obj.Status.Tools, obj.Status.ToolsTruncated = statusTools(tools(512, 300))
		b, err := json.Marshal(obj.Status)
		if err != nil {
			t.Fatal(err)
		}
		if len(b) > 64<<10 || !obj.Status.ToolsTruncated {
			t.Fatalf("status is %d bytes, truncated %v", len(b), obj.Status.ToolsTruncated)
		}
		if !strings.HasPrefix(obj.Status.Tools[0].Name, "mcp__srv__") {
			t.Fatalf("unexpected first tool %q", obj.Status.Tools[0].Name)
		}
	})
}
