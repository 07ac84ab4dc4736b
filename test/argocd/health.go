package argocd

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"time"

	lua "github.com/yuin/gopher-lua"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"sigs.k8s.io/cli-utils/pkg/kstatus/status"

	"github.com/mcpbridge/operator/api/v1alpha1"
	"github.com/mcpbridge/operator/internal/testenv"
)

// ScriptPath is the health check's source, relative to the module root.
const ScriptPath = "config/argocd/health.lua"

// HealthStatus is what a health script returns: Argo CD's status codes
// (Healthy, Progressing, Degraded, Suspended, Missing, Unknown).
type HealthStatus struct {
	Status  string `json:"status"`
	Message string `json:"message,omitempty"`
}

// validStatus is the set Argo CD accepts; any other code it reports as
// Unknown, which a test must not take for a verdict.
var validStatus = map[string]bool{
	"Healthy": true, "Progressing": true, "Degraded": true, "Suspended": true, "Missing": true, "Unknown": true,
}

// Script reads the shipped health check.
func Script() (string, error) {
	root, err := testenv.ModuleRoot()
	if err != nil {
		return "", err
	}
	b, err := os.ReadFile(filepath.Join(root, ScriptPath))
	return string(b), err
}

// Health runs script over obj as Argo CD's Lua VM does for a health
// override in argocd-cm (resource.customizations.health.<group>_<kind>):
// the standard libraries are not opened (overrides run without them unless
// useOpenLibs is set), only package, base and table; the object is the
// global obj; the script's return value must be a table.
func Health(ctx context.Context, script string, obj map[string]any) (HealthStatus, error) {
	l := lua.NewState(lua.Options{SkipOpenLibs: true})
	defer l.Close()
	for name, open := range map[string]lua.LGFunction{
		lua.LoadLibName: lua.OpenPackage, lua.BaseLibName: lua.OpenBase, lua.TabLibName: lua.OpenTable,
	} {
		if err := l.CallByParam(lua.P{Fn: l.NewFunction(open), Protect: true}, lua.LString(name)); err != nil {
			return HealthStatus{}, err
		}
	}
	ctx, cancel := context.WithTimeout(ctx, time.Second)
	defer cancel()
	l.SetContext(ctx)
	l.SetGlobal("obj", luaValue(l, obj))
	if err := l.DoString(script); err != nil {
		return HealthStatus{}, err
	}
	ret, ok := l.Get(-1).(*lua.LTable)
	if !ok {
		return HealthStatus{}, fmt.Errorf("the script returned %s, not a table", l.Get(-1).Type())
	}
	hs := HealthStatus{Status: lua.LVAsString(ret.RawGetString("status")), Message: lua.LVAsString(ret.RawGetString("message"))}
	if !validStatus[hs.Status] {
		return hs, fmt.Errorf("the script returned the status %q, which Argo CD reports as Unknown", hs.Status)
	}
	return hs, nil
}

// luaValue converts a decoded object as Argo CD's decodeValue does:
// numbers of every Go type become Lua numbers, maps tables, lists arrays.
func luaValue(l *lua.LState, v any) lua.LValue {
	switch v := v.(type) {
	case bool:
		return lua.LBool(v)
	case string:
		return lua.LString(v)
	case json.Number:
		return lua.LString(v)
	case float64:
		return lua.LNumber(v)
	case int:
		return lua.LNumber(v)
	case int32:
		return lua.LNumber(v)
	case int64:
		return lua.LNumber(v)
	case []any:
		t := l.CreateTable(len(v), 0)
		for _, item := range v {
			t.Append(luaValue(l, item))
		}
		return t
	case map[string]any:
		t := l.CreateTable(0, len(v))
		for k, item := range v {
			t.RawSetH(lua.LString(k), luaValue(l, item))
		}
		return t
	}
	return lua.LNil
}

// Kstatus is the kstatus verdict on obj, as Flux's health checks compute it.
func Kstatus(obj map[string]any) (status.Status, error) {
	res, err := status.Compute(&unstructured.Unstructured{Object: obj})
	if err != nil {
		return "", err
	}
	return res.Status, nil
}

// Agrees maps an Argo CD verdict to the kstatus verdict it must go with.
var Agrees = map[string]status.Status{
	"Healthy": status.CurrentStatus, "Progressing": status.InProgressStatus, "Degraded": status.FailedStatus,
}

// Unstructured converts an McpServer for Health and Kstatus as Argo CD and
// Flux see it: with apiVersion and kind (a typed client drops them), and
// without managedFields (noise in testdata; neither reads them).
func Unstructured(obj *v1alpha1.McpServer) (map[string]any, error) {
	if obj == nil {
		return nil, errors.New("no object")
	}
	u, err := runtime.DefaultUnstructuredConverter.ToUnstructured(obj)
	if err != nil {
		return nil, err
	}
	u["apiVersion"], u["kind"] = v1alpha1.GroupVersion.String(), "McpServer"
	unstructured.RemoveNestedField(u, "metadata", "managedFields")
	return u, nil
}
