package controller

import (
	"reflect"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	toolscache "k8s.io/client-go/tools/cache"

	"github.com/mcpbridge/operator/api/v1alpha1"
	"github.com/mcpbridge/operator/internal/podruntime"
)

func TestStripUnread(t *testing.T) {
	managed := []metav1.ManagedFieldsEntry{{Manager: "kubectl", Operation: metav1.ManagedFieldsOperationApply}}
	for _, tc := range []struct {
		name string
		in   map[string]string
		want map[string]string
	}{
		{"no annotations", nil, nil},
		{"only unread ones", map[string]string{"kubectl.kubernetes.io/last-applied-configuration": "{}"}, nil},
		{"read and unread", map[string]string{v1alpha1.RestartedAtAnnotation: "t", podruntime.TemplateHashAnnotation: "h", "a": "b"},
			map[string]string{v1alpha1.RestartedAtAnnotation: "t", podruntime.TemplateHashAnnotation: "h"}},
		{"only read ones", map[string]string{podruntime.TemplateHashAnnotation: "h"}, map[string]string{podruntime.TemplateHashAnnotation: "h"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			// A typed object and the metadata-only one of Secrets and ConfigMaps.
			for _, obj := range []metav1.Object{&corev1.Pod{}, &metav1.PartialObjectMetadata{}} {
				obj.SetAnnotations(tc.in)
				obj.SetManagedFields(managed)
				out, err := StripUnread(obj)
				if err != nil {
					t.Fatal(err)
				}
				o := out.(metav1.Object)
				if o.GetManagedFields() != nil || !reflect.DeepEqual(o.GetAnnotations(), tc.want) {
					t.Errorf("%T: managedFields %v, annotations %v; want none and %v", obj, o.GetManagedFields(), o.GetAnnotations(), tc.want)
				}
			}
		})
	}
	t.Run("a tombstone passes unchanged", func(t *testing.T) {
		in := toolscache.DeletedFinalStateUnknown{Key: "ns/name"}
		if out, err := StripUnread(in); err != nil || out != in {
			t.Errorf("StripUnread(tombstone) = %v, %v", out, err)
		}
	})
}

func TestStripOthersStatus(t *testing.T) {
	now := metav1.Now()
	full := func(replica string) *v1alpha1.McpServer {
		return &v1alpha1.McpServer{Status: v1alpha1.McpServerStatus{
			ObservedGeneration: 2, Phase: v1alpha1.PhaseReady, ServerName: "s", Runtime: v1alpha1.RuntimeLocal,
			Replica: replica, PodName: "p", ConnectionGeneration: 3, FailedAttempts: 1, ToolCount: 1,
			Tools:             []v1alpha1.ToolStatus{{Name: "mcp__s__t", RawName: "t"}},
			ServerInfo:        &v1alpha1.ServerInfo{Name: "fixture"},
			LastError:         &v1alpha1.LastError{Stage: "connect", Message: "refused"},
			LastConnectedTime: &now, NextRetryTime: &now,
			Conditions: []metav1.Condition{{Type: v1alpha1.ConditionReady, Status: metav1.ConditionTrue}},
		}}
	}
	// What every replica reads of another's server: its owner and spec, and
	// the status's scalars.
	stripped := full("r2")
	s := &stripped.Status
	s.Tools, s.ServerInfo, s.LastError, s.LastConnectedTime, s.NextRetryTime, s.Conditions = nil, nil, nil, nil, nil, nil
	for _, tc := range []struct {
		name string
		in   *v1alpha1.McpServer
		want *v1alpha1.McpServer
	}{
		{"another replica's status loses what only its owner reads", full("r2"), stripped},
		{"this replica's status stays whole", full("r1"), full("r1")},
		{"a status no replica wrote stays whole", full(""), full("")},
	} {
		t.Run(tc.name, func(t *testing.T) {
			out, err := StripOthersStatus("r1")(tc.in)
			if err != nil {
				t.Fatal(err)
			}
			if got := out.(*v1alpha1.McpServer).Status; !reflect.DeepEqual(got, tc.want.Status) {
				t.Errorf("status %+v, want %+v", got, tc.want.Status)
			}
		})
	}
	t.Run("other objects pass unchanged", func(t *testing.T) {
		in := &v1alpha1.McpToolSet{Spec: v1alpha1.McpToolSetSpec{Tools: []byte("gz")}}
		if out, err := StripOthersStatus("r1")(in); err != nil || out != any(in) || string(in.Spec.Tools) != "gz" {
			t.Errorf("StripOthersStatus(McpToolSet) = %v, %v", out, err)
		}
	})
}
