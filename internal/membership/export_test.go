package membership

// KeepLeaseOnStop makes m stop as a crashed process would: its Lease stays
// behind, no longer renewed.
func KeepLeaseOnStop(m *Membership) { m.keepLease = true }
