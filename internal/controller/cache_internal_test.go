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
