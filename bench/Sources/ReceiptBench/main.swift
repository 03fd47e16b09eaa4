import Foundation

// receiptq-bench: the benchmark behind scripts/bench. One subcommand per row; each prints a table
// and, with --json, merges its results into bench/results.json under its own key.
//
//   receiptq-bench list                 rows, one per line: name <TAB> services <TAB> summary <TAB> products <TAB> packages
//   receiptq-bench <row> [options]      run one row (see receiptq-bench <row> --help)

func usage() -> String {
    var lines = [
        "usage: receiptq-bench <row> [--iterations N] [--warmup N] [--json PATH] [--detail] [row options]",
        "       receiptq-bench list",
        "",
        "rows:",
    ]
    for row in BenchRows.all {
        lines.append("  \(row.name.padding(toLength: 12, withPad: " ", startingAt: 0)) \(row.summary)")
    }
    return lines.joined(separator: "\n")
}

func help(for row: any BenchRow.Type) -> String {
    var lines = ["usage: receiptq-bench \(row.name) [options]", "", row.summary, "", "options:"]
    for spec in BenchOptions.common + row.options {
        let name = spec.takesValue ? "\(spec.name) VALUE" : spec.name
        lines.append("  \(name.padding(toLength: 22, withPad: " ", startingAt: 0)) \(spec.help)")
    }
    lines.append("  (default iterations: \(row.defaultIterations))")
    return lines.joined(separator: "\n")
}

func fail(_ message: String, status: Int32 = 1) -> Never {
    FileHandle.standardError.write(Data("receiptq-bench: \(message)\n".utf8))
    exit(status)
}

let arguments = Array(CommandLine.arguments.dropFirst())
guard let command = arguments.first else { fail(usage(), status: 2) }

switch command {
case "-h", "--help", "help":
    print(usage())
case "list":
    for row in BenchRows.all {
        let services = row.services.isEmpty ? "-" : row.services.joined(separator: ",")
        let products = row.products.isEmpty ? "-" : row.products.joined(separator: ",")
        let packages = row.packages.isEmpty ? "-" : row.packages.joined(separator: ",")
        print("\(row.name)\t\(services)\t\(row.summary)\t\(products)\t\(packages)")
    }
default:
    guard let row = BenchRows.all.first(where: { $0.name == command }) else {
        fail("unknown row '\(command)'\n\(usage())", status: 2)
    }
    let rest = Array(arguments.dropFirst())
    if rest.contains("--help") || rest.contains("-h") {
        print(help(for: row))
        exit(0)
    }
    let options: BenchOptions
    do {
        options = try BenchOptions.parse(rest, rowOptions: row.options)
    } catch {
        fail("\(error)\n\(help(for: row))", status: 2)
    }
    #if DEBUG
    FileHandle.standardError.write(Data("receiptq-bench: warning: debug build; numbers are meaningless\n".utf8))
    #endif
    let machine = Machine.info()
    print(Machine.summary(machine))
    do {
        var result = try row.run(options)
        result["machine"] = machine
        result["max_rss_kib"] = Machine.maxRSSKiB()
        if result["partial"] as? Bool == true, let path = options.jsonPath {
            print("not writing \(path): a partial run (e.g. --workload) must not replace the row's full results")
        } else if let path = options.jsonPath {
            try ResultsFile.merge(key: row.name, value: result, machine: machine, into: path)
            print("wrote \(path) [\(row.name)]")
        }
    } catch {
        fail("\(row.name): \(error)")
    }
}
