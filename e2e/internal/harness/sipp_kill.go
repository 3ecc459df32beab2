package harness

import "syscall"

// Kill ends SIPp at once with SIGKILL, as a server that dies: no reply,
// no BYE, its port closed.
func (r *SIPpRun) Kill() {
	r.cmd.Process.Signal(syscall.SIGKILL)
	<-r.done
}
