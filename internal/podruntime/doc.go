// Package podruntime renders the Kubernetes objects of the Pod runtime for
// one McpServer whose stdio server runs in its own Pod: the Deployment (one
// Pod, Recreate, owned by the McpServer, restricted by default, the shim as
// the container's entrypoint) and the Secret holding the tunnel's token. It
// holds pure functions only: the controller creates and updates what they
// return, and the supervisor tunnels to the Pod they describe.
//
// See docs/design.md, "The server's Pod" and "The shim and the tunnel".
package podruntime
