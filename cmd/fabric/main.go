// Command fabric runs and administers a fabric host: the background engine
// of a FlowFabric deployment, with its scanners and dispatchers loaded as
// WebAssembly plugins.
//
// Run `fabric help` for the command list and `fabric <command> --help` for
// each command's flags.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"sort"
	"strings"
	"syscall"
)

// command is one CLI verb. Nested verbs ("lua print") are registered under
// their full space-separated name.
type command struct {
	name    string
	summary string
	usage   string // argument synopsis after the name
	setup   func(fs *flag.FlagSet) func(ctx context.Context, env *cliEnv, args []string) error
}

// cliEnv carries the process streams so tests can run commands in-process.
type cliEnv struct {
	stdout io.Writer
	stderr io.Writer
}

// errUsage marks an error that should print usage and exit 2.
var errUsage = errors.New("usage error")

var commands = map[string]*command{}

func register(c *command) { commands[c.name] = c }

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	os.Exit(runCLI(ctx, &cliEnv{stdout: os.Stdout, stderr: os.Stderr}, os.Args[1:]))
}

// runCLI dispatches args and returns the process exit code: 0 success,
// 1 failure, 2 usage error.
func runCLI(ctx context.Context, env *cliEnv, args []string) int {
	if len(args) == 0 || args[0] == "help" || args[0] == "-h" || args[0] == "--help" {
		printHelp(env.stdout)
		return 0
	}
	// Longest registered prefix of the args names the command.
	var cmd *command
	var rest []string
	for n := len(args); n > 0; n-- {
		if c, ok := commands[strings.Join(args[:n], " ")]; ok {
			cmd, rest = c, args[n:]
			break
		}
	}
	if cmd == nil {
		fmt.Fprintf(env.stderr, "fabric: unknown command %q\n\n", strings.Join(args, " "))
		printHelp(env.stderr)
		return 2
	}
	fs := flag.NewFlagSet("fabric "+cmd.name, flag.ContinueOnError)
	fs.SetOutput(env.stderr)
	run := cmd.setup(fs)
	fs.Usage = func() {
		out := fs.Output()
		fmt.Fprintf(out, "Usage: fabric %s [flags] %s\n\n%s\n", cmd.name, cmd.usage, cmd.summary)
		hasFlags := false
		fs.VisitAll(func(*flag.Flag) { hasFlags = true })
		if hasFlags {
			fmt.Fprintln(out, "\nFlags:")
			fs.PrintDefaults()
		}
	}
	if err := fs.Parse(rest); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			fs.SetOutput(env.stdout)
			fs.Usage()
			return 0
		}
		return 2
	}
	if err := run(ctx, env, fs.Args()); err != nil {
		if errors.Is(err, errUsage) {
			fmt.Fprintf(env.stderr, "fabric %s: %v\n", cmd.name, err)
			fs.Usage()
			return 2
		}
		fmt.Fprintf(env.stderr, "fabric %s: %v\n", cmd.name, err)
		return 1
	}
	return 0
}

func printHelp(w io.Writer) {
	fmt.Fprintln(w, "fabric runs FlowFabric's background engine as WebAssembly plugins.")
	fmt.Fprintln(w, "\nUsage: fabric <command> [flags]\n\nCommands:")
	names := make([]string, 0, len(commands))
	for n := range commands {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		fmt.Fprintf(w, "  %-22s %s\n", n, commands[n].summary)
	}
	fmt.Fprintln(w, "\nRun 'fabric <command> --help' for a command's flags.")
}

// noArgs rejects positional arguments.
func noArgs(args []string) error {
	if len(args) > 0 {
		return fmt.Errorf("%w: unexpected arguments %q", errUsage, args)
	}
	return nil
}
