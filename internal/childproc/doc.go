// Package childproc holds the process attributes of the servers fabric
// starts as children (redis-server, postgres), written once for both
// launchers and per operating system.
package childproc
