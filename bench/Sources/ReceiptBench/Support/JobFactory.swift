import DevTools
import Foundation
import ReceiptCore
import ReceiptSignature

/// Makes queue jobs as the ingest API would, fast enough to feed thousands per second.
///
/// One unified production receipt (a lifetime purchase and a monthly subscription, like
/// ``ReceiptForger/demoReceipt(bundleID:now:)``) is forged and signed once. Each job gets a copy
/// whose four transaction ids (transaction + original, per purchase) carry the job's serial number,
/// patched into the DER in place: every job writes its own `in_app_purchases` rows, as real
/// traffic does, instead of all lanes fighting over the same two rows. The copy's signature no
/// longer matches, which nothing on this path checks (the worker does not verify signatures and
/// the mock App Store only decodes). The envelope is the encoder's output for a template, with the
/// id, `enqueued_at` and receipt spliced in, so making a job costs a few microseconds.
struct JobFactory: Sendable {
    /// The signed receipt (DER) and where its 10-digit serials sit.
    struct ReceiptTemplate: Sendable {
        var der: [UInt8]
        var serialOffsets: [Int]
        var bundleID: String
        /// Run-unique first digits of every transaction id.
        var tag: String
    }

    static let serialDigits = 10
    private static let placeholderID = UUID(uuidString: "0BADC0DE-0000-4000-8000-00000000B0B0")!
    /// 2100-01-01T00:00:00Z: 13 digits in milliseconds, like any date of this century, and exact in binary.
    private static let placeholderDate = Date(timeIntervalSince1970: 4_102_444_800)
    private static let placeholderReceipt = "@@RECEIPT@@"
    private static let placeholderSigned = "@@SIGNED@@"
    private static let placeholderUser = "@@USER@@"

    let receipt: ReceiptTemplate
    /// The apps the jobs belong to, in turn (job `serial` is app `serial % count`'s).
    let appIDs: [UUID]
    /// StoreKit 2 jobs (a transaction id each, for the Server API) instead of receipts: the id is
    /// the template's tag and the job's serial, so every job is its own purchase at the mock.
    let transactionIDs: Bool
    /// Signed transactions the jobs carry, as the door leaves a verified JWS (entry `i` is the
    /// purchase `tag + serial(i)` of app `i % appIDs.count`); job `serial` carries entry
    /// `serial % count`. Nil: bare ids (or receipts).
    let signedPool: [String]?
    /// A steady app's customers: job `serial` re-validates customer `serial % population`'s
    /// receipt (the same transaction ids, so the same purchases and subscription), instead of
    /// being a new customer. Nil: every job its own customer.
    let population: Int?
    /// Per app: the envelope's bytes between the placeholders, and which value follows each segment.
    private let templates: [(segments: [[UInt8]], slots: [Slot])]

    private enum Slot: Sendable {
        case id, enqueuedAt, receipt, signed, user
    }

    /// Forges and signs the receipt (two RSA key generations and one signature: about a second).
    static func forgeReceipt(bundleID: String) throws -> ReceiptTemplate {
        let tag = String(UInt32.random(in: 10_000_000...99_999_999))
        let marker = String(repeating: "0", count: serialDigits)
        var receipt = ReceiptForger.demoReceipt(bundleID: bundleID)
        receipt.environment = .production
        receipt.opaqueValue = Array("receiptq-bench".utf8)
        for (index, suffix) in ["01", "02"].enumerated() where index < receipt.inApp.count {
            receipt.inApp[index].transactionID = "\(tag)\(marker)\(suffix)"
            receipt.inApp[index].originalTransactionID = "\(tag)\(marker)\(suffix)"
        }
        let der = try ReceiptForger.unified(receipt, authority: TestCertificateAuthority.generate())
        let needle = Array("\(tag)\(marker)".utf8)
        let offsets = occurrences(of: needle, in: der).map { $0 + tag.utf8.count }
        guard offsets.count == 2 * receipt.inApp.count else {
            throw BenchFailure(description: "expected \(2 * receipt.inApp.count) transaction ids in the forged receipt, found \(offsets.count)")
        }
        return ReceiptTemplate(der: der, serialOffsets: offsets, bundleID: bundleID, tag: tag)
    }

    init(receipt: ReceiptTemplate, appID: UUID, transactionIDs: Bool = false) throws {
        try self.init(receipt: receipt, appIDs: [appID], transactionIDs: transactionIDs)
    }

    init(
        receipt: ReceiptTemplate, appIDs: [UUID], transactionIDs: Bool = false, signedPool: [String]? = nil, population: Int? = nil
    ) throws {
        guard !appIDs.isEmpty else { throw BenchFailure(description: "a job factory needs at least one app") }
        if let population, population < 1 { throw BenchFailure(description: "a population holds at least one customer") }
        self.population = population
        if let signedPool, signedPool.isEmpty || signedPool.count % appIDs.count != 0 {
            throw BenchFailure(description: "a signed pool holds the same number of transactions for every app")
        }
        self.receipt = receipt
        self.appIDs = appIDs
        self.transactionIDs = transactionIDs || signedPool != nil
        self.signedPool = signedPool
        templates = try appIDs.map { try Self.template(receipt: receipt, appID: $0, transactionIDs: transactionIDs, signed: signedPool != nil) }

        // The splice must round-trip, or every measured job would be a poison job.
        for serial in appIDs.indices.map({ 42 + $0 }) {
            let probe = makeJob(serial: serial, now: Date(timeIntervalSince1970: 1_763_700_000.5))
            let decoded = try JobEnvelope.decode(probe.bytes)
            let spliced =
                self.transactionIDs
                ? decoded.payload.purchase?.transactionID
                : try ReceiptDecoder.decode(base64: decoded.payload.purchase?.receiptData ?? "").inApp.first?.transactionID
            let signed: String? =
                if case .transaction(let job) = decoded.payload { job.signedTransaction } else { nil }
            guard decoded.id == probe.id, decoded.appID == appIDs[serial % appIDs.count],
                Self.milliseconds(decoded.enqueuedAt) == 1_763_700_000_500,
                spliced == transactionID(serial: serial) + (self.transactionIDs ? "" : "01"),
                signed == signedPool.map({ $0[serial % $0.count] }),
                decoded.payload.purchase?.submission.userIdentifier == user(serial: serial)
            else { throw BenchFailure(description: "the spliced envelope does not decode to what was spliced in") }
        }
    }

    private static func template(
        receipt: ReceiptTemplate, appID: UUID, transactionIDs: Bool, signed: Bool
    ) throws -> (segments: [[UInt8]], slots: [Slot]) {
        let templateEnvelope =
            transactionIDs || signed
            ? JobEnvelope(
                id: Self.placeholderID, appID: appID, enqueuedAt: Self.placeholderDate, origin: .api,
                payload: .transaction(
                    TransactionJob(
                        // No bundle id: each app's own, as the door leaves it for a bare transaction id.
                        signedTransaction: signed ? Self.placeholderSigned : nil, transactionID: Self.placeholderReceipt,
                        environment: "production", submission: Submission(userIdentifier: Self.placeholderUser, countryCode: "US"))))
            : JobEnvelope(
                id: Self.placeholderID, appID: appID, enqueuedAt: Self.placeholderDate, origin: .api,
                payload: .receipt(
                    ReceiptJob(
                        receipt: Self.placeholderReceipt, style: .unified, bundleID: receipt.bundleID, environment: "production",
                        submission: Submission(userIdentifier: Self.placeholderUser, countryCode: "US"))))
        // Every job names the bench's result channel, as a job of a waiting API request does.
        var envelope = templateEnvelope
        envelope.replyTo = Self.resultNode
        let template = envelope.encoded()
        let markers: [(Slot, [UInt8])] =
            [
                (.id, Array(Self.placeholderID.canonical.utf8)),
                (.enqueuedAt, Array(String(Self.milliseconds(Self.placeholderDate)).utf8)),
                (.receipt, Array(Self.placeholderReceipt.utf8)),
                (.user, Array(Self.placeholderUser.utf8)),
            ] + (signed ? [(.signed, Array(Self.placeholderSigned.utf8))] : [])
        var found: [(offset: Int, length: Int, slot: Slot)] = []
        for (slot, marker) in markers {
            let at = Self.occurrences(of: marker, in: template)
            guard at.count == 1 else { throw BenchFailure(description: "envelope template: \(slot) found \(at.count) times") }
            found.append((at[0], marker.count, slot))
        }
        found.sort { $0.offset < $1.offset }
        var segments: [[UInt8]] = []
        var start = 0
        for item in found {
            segments.append(Array(template[start..<item.offset]))
            start = item.offset + item.length
        }
        segments.append(Array(template[start...]))
        return (segments, found.map(\.slot))
    }

    /// The node name the bench's jobs reply to (its `ResultWatcher` subscribes to that channel).
    static let resultNode = "bench"

    /// The base64 receipt of job `serial`.
    func receiptBase64(serial: Int) -> String {
        var der = receipt.der
        let digits = Array(Self.serial(customer(serial: serial)).utf8)
        for offset in receipt.serialOffsets {
            for index in 0..<digits.count { der[offset + index] = digits[index] }
        }
        return Data(der).base64EncodedString()
    }

    /// The envelope bytes of job `serial`, enqueued `now`.
    func makeJob(serial: Int, now: Date = Date()) -> (id: UUID, bytes: [UInt8]) {
        let id = JobID.make(at: now)
        var values: [Slot: [UInt8]] = [
            .id: Array(id.canonical.utf8), .enqueuedAt: Array(String(Self.milliseconds(now)).utf8),
            .receipt: Array((transactionIDs ? transactionID(serial: serial) : receiptBase64(serial: serial)).utf8),
            .user: Array(user(serial: serial).utf8),
        ]
        if let signedPool { values[.signed] = Array(signedPool[serial % signedPool.count].utf8) }
        let (segments, slots) = templates[serial % templates.count]
        var bytes: [UInt8] = []
        bytes.reserveCapacity(segments.reduce(0) { $0 + $1.count } + 4_096)
        for (index, segment) in segments.enumerated() {
            bytes += segment
            if index < slots.count, let value = values[slots[index]] { bytes += value }
        }
        return (id, bytes)
    }

    /// The transaction id job `serial` asks about: its own, or its signed pool entry's.
    func transactionID(serial: Int) -> String {
        "\(receipt.tag)\(Self.serial(signedPool.map { serial % $0.count } ?? customer(serial: serial)))"
    }

    /// The user id job `serial` submits: the population's customer's own, else one for every job.
    func user(serial: Int) -> String { population == nil ? "bench-user" : "bench-customer-\(customer(serial: serial))" }

    /// The customer job `serial` is of: its own serial, or its member of the population.
    func customer(serial: Int) -> Int { population.map { serial % $0 } ?? serial }

    static func serial(_ value: Int) -> String {
        let text = String(value % 10_000_000_000)
        return String(repeating: "0", count: serialDigits - text.count) + text
    }

    static func milliseconds(_ date: Date) -> Int64 { Int64((date.timeIntervalSince1970 * 1000).rounded()) }

    static func occurrences(of needle: [UInt8], in haystack: [UInt8]) -> [Int] {
        guard !needle.isEmpty, haystack.count >= needle.count else { return [] }
        var found: [Int] = []
        for start in 0...(haystack.count - needle.count) where haystack[start] == needle[0] {
            if haystack[start..<(start + needle.count)].elementsEqual(needle) { found.append(start) }
        }
        return found
    }
}
