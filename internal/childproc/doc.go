// Package childproc is the process child of the servers fabric starts
// (redis-server, postgres), written once for both launchers: its process
// attributes per operating system (Attr), and Child — start, wait until
// ready, signal then kill its process group, reap.
package childproc
