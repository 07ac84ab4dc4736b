// Package certs owns the operator's own X.509: a certificate authority kept
// in a Secret of the manager's namespace, the certificates it issues, their
// rotation before expiry, and the publication of the CA's certificate in a
// ConfigMap of each namespace agents call from.
//
// ca.go issues (a CA, then leaf certificates for servers or clients signed
// by it; ECDSA P-256) and parses what a Secret holds. secret.go loads the CA
// from its Secret or creates it when absent: several manager replicas may
// start at once, so a create that loses the race (AlreadyExists) reads the
// winner's CA instead, and every replica serves certificates of the same CA.
// serving.go keeps one serving certificate current for a TLS listener's
// GetCertificate (and a client's GetClientCertificate, for mutual TLS):
// issued at start, re-issued (from the CA as the Secret then holds it) a
// configured margin before it expires, without a restart.
// publish.go writes the CA's certificate as ca.crt in a ConfigMap of every
// watched namespace, as Kubernetes publishes kube-root-ca.crt, and puts it
// back when someone edits or deletes it.
//
// The gateway uses it when no --gateway-cert-dir is given (see
// docs/design.md, "The gateway", TLS), and internal/peer for the replicas'
// own CA and their mutual TLS (see "Forwarding between replicas").
package certs
