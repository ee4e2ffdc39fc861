// Command fabric runs and administers a fabric host: the background engine
// of a FlowFabric deployment, with its scanners and dispatchers loaded as
// WebAssembly plugins.
//
// Run `fabric help` for the command list and `fabric <command> --help` for
// each command's flags.
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"sort"
	"strings"
	"syscall"

	"github.com/fabric-host/fabric/internal/termsafe"
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
	// getenv reads the environment (os.Getenv when nil; tests that run in
	// parallel give their own).
	getenv func(string) string
}

// env reads the environment variable key.
func (e *cliEnv) env(key string) string {
	if e.getenv != nil {
		return e.getenv(key)
	}
	return os.Getenv(key)
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
	if len(args) > 1 && args[0] == "help" {
		// "fabric help lua load" is "fabric lua load --help".
		args = append(args[1:len(args):len(args)], "--help")
	}
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
		if subs := subcommands(args[0]); len(subs) > 0 && len(args) <= 2 {
			// A group alone, or its help: what its subcommands are.
			switch {
			case len(args) == 2 && (args[1] == "-h" || args[1] == "--help" || args[1] == "-help"):
				printGroup(env.stdout, args[0], subs)
				return 0
			case len(args) == 1:
				fmt.Fprintf(env.stderr, "'fabric %s' takes a subcommand: %s\n\n", args[0], strings.Join(subs, ", "))
				printGroup(env.stderr, args[0], subs)
				return 2
			}
		}
		fmt.Fprintf(env.stderr, "fabric: unknown command %q\n", strings.Join(args, " "))
		if subs := subcommands(args[0]); len(subs) > 0 {
			fmt.Fprintf(env.stderr, "'fabric %s' takes a subcommand: %s\n", args[0], strings.Join(subs, ", "))
		}
		fmt.Fprintln(env.stderr, "run 'fabric help' for the command list")
		return 2
	}
	fs := flag.NewFlagSet("fabric "+cmd.name, flag.ContinueOnError)
	run := cmd.setup(fs)
	// The flag package prints usage itself on -h and on every parse error
	// (to its output, before returning). All printing is done here instead,
	// once: help to stdout, usage errors as one line plus a hint on stderr.
	fs.SetOutput(io.Discard)
	fs.Usage = func() {}
	if err := fs.Parse(rest); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			printUsage(env.stdout, cmd, fs)
			return 0
		}
		return usageError(env.stderr, cmd, err)
	}
	if err := run(ctx, env, fs.Args()); err != nil {
		if errors.Is(err, errUsage) {
			return usageError(env.stderr, cmd, err)
		}
		// An error can quote what a backend or plugin said: escaped.
		fmt.Fprintf(env.stderr, "fabric %s: %s\n", cmd.name, termsafe.Lines(err.Error()))
		return 1
	}
	return 0
}

// usageError prints the reason for a usage error and where the usage is,
// and returns exit code 2.
func usageError(w io.Writer, cmd *command, err error) int {
	msg := strings.TrimPrefix(err.Error(), errUsage.Error()+": ")
	fmt.Fprintf(w, "fabric %s: %s\nrun 'fabric %s --help' for usage\n", cmd.name, msg, cmd.name)
	return 2
}

// printUsage prints a command's synopsis, summary and flags to w. It is
// the only place usage is printed.
func printUsage(w io.Writer, cmd *command, fs *flag.FlagSet) {
	fmt.Fprintf(w, "Usage: fabric %s [flags] %s\n\n%s\n", cmd.name, cmd.usage, cmd.summary)
	hasFlags := false
	fs.VisitAll(func(*flag.Flag) { hasFlags = true })
	if hasFlags {
		fmt.Fprintln(w, "\nFlags:")
		out := fs.Output()
		fs.SetOutput(w)
		fs.PrintDefaults()
		fs.SetOutput(out)
	}
}

// subcommands lists the registered subcommands of group ("lua" → load,
// print).
func subcommands(group string) []string {
	var subs []string
	for n := range commands {
		if g, sub, ok := strings.Cut(n, " "); ok && g == group {
			subs = append(subs, sub)
		}
	}
	sort.Strings(subs)
	return subs
}

// printGroup prints the usage of a command group: its subcommands with
// their summaries.
func printGroup(w io.Writer, group string, subs []string) {
	fmt.Fprintf(w, "Usage: fabric %s <subcommand> [flags]\n\nSubcommands:\n", group)
	for _, sub := range subs {
		fmt.Fprintf(w, "  %-10s %s\n", sub, commands[group+" "+sub].summary)
	}
	fmt.Fprintf(w, "\nRun 'fabric %s <subcommand> --help' for a subcommand's flags.\n", group)
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

// printJSON prints v as indented JSON with every control character in
// its strings as a \u escape (the same data, safe on a terminal).
func printJSON(w io.Writer, v any) error {
	b, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		return fmt.Errorf("encode JSON: %w", err)
	}
	_, err = w.Write(append(termsafe.JSON(b), '\n'))
	return err
}

// noArgs rejects positional arguments.
func noArgs(args []string) error {
	if len(args) > 0 {
		return fmt.Errorf("%w: unexpected arguments %q", errUsage, args)
	}
	return nil
}
