package controller

import (
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/mcpbridge/operator/api/v1alpha1"
)

func TestWrittenVersionsSeeOnlyTheLastWrite(t *testing.T) {
	server := func(name, rv string) *v1alpha1.McpServer {
		return &v1alpha1.McpServer{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: name, ResourceVersion: rv}}
	}
	w := newWrittenVersions()
	w.wrote(server("a", "10"))
	w.wrote(server("b", "11"))
	w.wrote(server("a", "12"))
	w.wrote(server("c", "13"))
	w.forget(client.ObjectKeyFromObject(server("c", "")))
	cases := []struct {
		name string
		set  *writtenVersions
		obj  *v1alpha1.McpServer
		want bool
	}{
		{"the version written last", w, server("a", "12"), true},
		{"an earlier write of the same server", w, server("a", "10"), false},
		{"a version written by someone else", w, server("a", "14"), false},
		{"another server's last write", w, server("b", "11"), true},
		{"a server never written", w, server("d", "12"), false},
		{"a server forgotten", w, server("c", "13"), false},
		{"no set", nil, server("a", "12"), false},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			if got := tc.set.seenIn(tc.obj); got != tc.want {
				t.Fatalf("seenIn(%s@%s) = %v, want %v", tc.obj.Name, tc.obj.ResourceVersion, got, tc.want)
			}
		})
	}
}
