//go:build !linux

package nftables

func newNetlinkKernel(netns string) (kernel, error) {
	return nil, errNotSupported
}
