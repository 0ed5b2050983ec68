//go:build !linux

package conntrack

// openTable fails: conntrack is a Linux netfilter facility.
func openTable(string) (table, error) {
	return nil, errNotSupported
}
