import Foundation

/// `bench/results.json`: one key per row, plus `machine` (the latest run's). Each row replaces only
/// its own key, so rows run at different times, by different people, accumulate in one file.
enum ResultsFile {
    /// Replaces `key` (and the top-level `machine`) in the JSON object at `path`, keeping every other
    /// key. The file is rewritten atomically (temp file + rename) under an exclusive `flock` on its
    /// directory, so two rows finishing at once cannot lose each other's results.
    static func merge(key: String, value: [String: Any], machine: [String: Any], into path: String) throws {
        let url = URL(fileURLWithPath: path)
        let directory = url.deletingLastPathComponent()
        try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)

        let lock = open(directory.path, O_RDONLY | O_DIRECTORY)
        guard lock >= 0 else { throw BenchFailure(description: "cannot open \(directory.path) to lock it") }
        defer { close(lock) }
        guard flock(lock, LOCK_EX) == 0 else { throw BenchFailure(description: "cannot lock \(directory.path)") }
        defer { flock(lock, LOCK_UN) }

        var document: [String: Any] = [:]
        if let data = FileManager.default.contents(atPath: url.path), !data.isEmpty {
            guard let existing = try? JSONSerialization.jsonObject(with: data) as? [String: Any] else {
                // Never silently drop other rows' results: stop and let a human look.
                throw BenchFailure(description: "\(path) is not a JSON object; fix or delete it")
            }
            document = existing
        }
        document[key] = value
        document["machine"] = machine

        let data = try JSONSerialization.data(withJSONObject: document, options: [.prettyPrinted, .sortedKeys])
        let temporary = directory.appendingPathComponent(".\(url.lastPathComponent).\(getpid()).tmp")
        try (data + Data("\n".utf8)).write(to: temporary)
        guard rename(temporary.path, url.path) == 0 else {
            try? FileManager.default.removeItem(at: temporary)
            throw BenchFailure(description: "cannot rename \(temporary.path) to \(url.path)")
        }
    }
}
