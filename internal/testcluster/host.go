package testcluster

import (
	"errors"
	"fmt"
	"os"
	"sort"
	"strconv"
	"strings"
	"syscall"

	"k8s.io/apimachinery/pkg/types"
)

// PodProcesses lists the processes of a Pod on the node: those in the Pod's
// cgroup (kubelet names it pod<UID> under CgroupRoot).
func PodProcesses(uid types.UID) ([]int, error) {
	entries, err := os.ReadDir("/proc")
	if err != nil {
		return nil, err
	}
	marker := CgroupRoot + "/"
	podDir := "/pod" + string(uid) + "/"
	var pids []int
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		b, err := os.ReadFile(fmt.Sprintf("/proc/%d/cgroup", pid))
		if err != nil {
			continue // gone meanwhile
		}
		cg := string(b)
		if strings.Contains(cg, marker) && strings.Contains(cg, podDir) {
			pids = append(pids, pid)
		}
	}
	return pids, nil
}

// unmountUnder detaches every mount below dir, deepest first (containerd's
// snapshots, kubelet's volumes, network namespaces).
func unmountUnder(dir string) error {
	mounts, err := mountPoints()
	if err != nil {
		return err
	}
	var under []string
	for m := range mounts {
		if strings.HasPrefix(m, dir+"/") {
			under = append(under, m)
		}
	}
	sort.Sort(sort.Reverse(sort.StringSlice(under)))
	var errs []error
	for _, m := range under {
		if err := syscall.Unmount(m, syscall.MNT_DETACH); err != nil && !errors.Is(err, syscall.EINVAL) && !errors.Is(err, syscall.ENOENT) {
			errs = append(errs, fmt.Errorf("unmounting %s: %w", m, err))
		}
	}
	return errors.Join(errs...)
}
