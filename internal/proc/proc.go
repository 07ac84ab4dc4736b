package proc

import (
	"errors"
	"syscall"
)

// ReapGroup waits for the members of a killed process group that are this
// process's children (orphans re-parented to it as a subreaper) and
// returns once none is left. Whoever else reaps a member concurrently only
// takes what is dead already.
func ReapGroup(pgid int) {
	for {
		_, err := syscall.Wait4(-pgid, nil, 0, nil)
		if err != nil && !errors.Is(err, syscall.EINTR) {
			return
		}
	}
}

// BecomeSubreaper makes this process adopt orphaned descendants, as PID 1
// does anyway, so that the grandchildren of a stdio server (an npx
// launcher's node process) come back to it to be reaped instead of staying
// zombies.
func BecomeSubreaper() error {
	const prSetChildSubreaper = 36
	if _, _, errno := syscall.RawSyscall(syscall.SYS_PRCTL, prSetChildSubreaper, 1, 0); errno != 0 {
		return errno
	}
	return nil
}
