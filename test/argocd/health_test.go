package argocd_test

import (
	"context"
	"os"
	"path/filepath"
	"testing"

	"sigs.k8s.io/yaml"

	"github.com/mcpbridge/operator/internal/testenv"
	"github.com/mcpbridge/operator/test/argocd"
)

// TestHealthOfMalformedObjects: whatever an object holds, the script
// returns a verdict Argo CD accepts instead of failing in Lua.
func TestHealthOfMalformedObjects(t *testing.T) {
	script := readScript(t)
	for name, tc := range map[string]struct {
		obj  map[string]any
		want string
	}{
		"no metadata, no status":   {map[string]any{}, "Progressing"},
		"status is a string":       {map[string]any{"status": "broken"}, "Progressing"},
		"conditions is a string":   {obj(1, map[string]any{"observedGeneration": int64(1), "conditions": "x"}), "Progressing"},
		"a condition is a number":  {obj(1, map[string]any{"observedGeneration": int64(1), "conditions": []any{int64(3)}}), "Progressing"},
		"lastError is a number":    {obj(1, stalledStatus(int64(7))), "Degraded"},
		"generation is a string":   {map[string]any{"metadata": map[string]any{"generation": "1"}, "status": map[string]any{"observedGeneration": int64(1)}}, "Progressing"},
		"stalled without messages": {obj(1, map[string]any{"observedGeneration": int64(1), "conditions": []any{map[string]any{"type": "Stalled", "status": "True"}}}), "Degraded"},
	} {
		t.Run(name, func(t *testing.T) {
			got, err := argocd.Health(context.Background(), script, tc.obj)
			if err != nil {
				t.Fatal(err)
			}
			if got.Status != tc.want || got.Message == "" {
				t.Errorf("health %+v, want status %s with a message", got, tc.want)
			}
		})
	}
}

// TestArgoCDSnippetCarriesTheScript: the argocd-cm snippet that
// `make manifests` writes holds health.lua unchanged under Argo CD's key.
func TestArgoCDSnippetCarriesTheScript(t *testing.T) {
	root, err := testenv.ModuleRoot()
	if err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(filepath.Join(root, "config", "argocd", "argocd-cm.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var cm struct {
		Kind     string            `json:"kind"`
		Metadata map[string]any    `json:"metadata"`
		Data     map[string]string `json:"data"`
	}
	if err := yaml.Unmarshal(b, &cm); err != nil {
		t.Fatal(err)
	}
	if cm.Kind != "ConfigMap" || cm.Metadata["name"] != "argocd-cm" {
		t.Errorf("the snippet is a %s named %v, want the ConfigMap argocd-cm", cm.Kind, cm.Metadata["name"])
	}
	const key = "resource.customizations.health.mcpbridge.dev_McpServer"
	if got := cm.Data[key]; got != readScript(t) {
		t.Errorf("data[%s] of config/argocd/argocd-cm.yaml is not %s: run `make manifests`", key, argocd.ScriptPath)
	}
}

func readScript(t *testing.T) string {
	t.Helper()
	s, err := argocd.Script()
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func obj(generation int64, st map[string]any) map[string]any {
	return map[string]any{"metadata": map[string]any{"generation": generation}, "status": st}
}

func stalledStatus(lastError any) map[string]any {
	return map[string]any{"observedGeneration": int64(1), "phase": "Failed", "lastError": lastError,
		"conditions": []any{map[string]any{"type": "Stalled", "status": "True", "reason": "ReconnectExhausted", "message": "Gave up"}}}
}
