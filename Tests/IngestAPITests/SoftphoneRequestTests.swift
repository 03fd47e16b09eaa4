import Foundation
import IngestAPI
import ReceiptCore
import ReceiptTesting
import Testing

@Suite("Softphone requests: query strings, form and JSON bodies, validation")
struct SoftphoneRequestTests {
    func parameters(_ text: String) throws -> [SoftphoneParameter] { try SoftphoneForm.parse(Array(text.utf8)).get() }

    /// The error code of a failed parse, nil when it succeeded.
    func code<T>(_ result: Result<T, SoftphoneRequestError>) -> String? {
        if case .failure(let error) = result { return error.codeName }
        return nil
    }

    func parse(_ text: String) throws -> Result<SoftphoneRequest, SoftphoneRequestError> {
        SoftphoneRequest.parse(try parameters(text))
    }

    @Test("Form text: + is a space, %XX a byte, a stray % stays, empty pairs are skipped, the first = splits")
    func formDecoding() throws {
        #expect(
            try parameters("a=1&b=x+y&&c=%2B%zz%4&d&e=k=v&")
                == [.init("a", "1"), .init("b", "x y"), .init("c", "+%zz%4"), .init("d", ""), .init("e", "k=v")])
        #expect(try parameters("") == [])
        #expect(try parameters("n%C3%A4me=caf%C3%A9") == [.init("näme", "café")])
        #expect(code(SoftphoneForm.parse(Array("a=%FF".utf8))) == "invalid_encoding")
        let many = (0...SoftphoneRequest.maxParameters).map { "p\($0)=1" }.joined(separator: "&")
        #expect(code(SoftphoneForm.parse(Array(many.utf8))) == "too_many_parameters")
    }

    @Test("A receipt in a raw query string survives its + turned into spaces, or left as +, or encoded as %2B")
    func mangledBase64() throws {
        let (base64, receipt) = try Fixtures.receipt()
        let encoded = base64.replacingOccurrences(of: "+", with: "%2B").replacingOccurrences(of: "/", with: "%2F")
            .replacingOccurrences(of: "=", with: "%3D")
        for query in [
            "username=johndow&product=\(receipt.inApp[0].productID)&receipt=\(base64)",
            "username=johndow&product=\(receipt.inApp[0].productID)&receipt=\(base64.replacingOccurrences(of: "+", with: " "))",
            "username=johndow&product=\(receipt.inApp[0].productID)&receipt=\(encoded)",
        ] {
            let request = try parse(query).get()
            #expect(request.receipt.base64 == base64)
            #expect(request.receipt.receipt.bundleID == Fixtures.bundleID)
            #expect(request.productCode == receipt.inApp[0].productID)
            #expect(request.username == "johndow")
        }
    }

    @Test("What is stored: username as user_identifier, price/currency/productCode and account variables as metadata, credentials never")
    func stored() throws {
        let (base64, _) = try Fixtures.receipt()
        let request = try parse(
            "receipt=\(base64)&productCode=credit5&Price=4.99&currency=EUR&username=johndow&token=rq_secret&password=pw&sip_domain=example.com&Token=rq_secret"
        ).get()
        #expect(request.username == "johndow")
        #expect(
            request.metadata == ["productCode": "credit5", "price": "4.99", "currency": "EUR", "sip_domain": "example.com"])
        let submission = request.submission
        #expect(submission.userIdentifier == "johndow")
        #expect(submission.metadata?["price"]?.stringValue == "4.99")
        #expect(!String(decoding: try JSONEncoder().encode(submission), as: UTF8.self).contains("rq_secret"))
        #expect(SoftphoneRequest.token(in: try parameters("a=1&TOKEN=abc")) == "abc")
    }

    @Test("Bad input names the problem in a sentence the user can read")
    func refusals() throws {
        let (base64, _) = try Fixtures.receipt()
        let long = String(repeating: "x", count: SoftphoneRequest.maxValueLength + 1)
        let cases: [(String, String)] = [
            ("productCode=p", "missing_parameter"),
            ("receipt=\(base64)", "missing_parameter"),
            ("receipt=&productCode=p", "missing_parameter"),
            ("receipt=\(base64)&product=a&productCode=b", "duplicate_parameter"),
            ("receipt=bm90IGEgcmVjZWlwdA%3D%3D&productCode=p", "invalid_receipt"),
            ("receipt=\(base64)&productCode=p&note=\(long)", "parameter_too_long"),
            ("receipt=\(base64)&productCode=p&\(String(repeating: "n", count: 65))=1", "invalid_name"),
            ("receipt=\(base64)&productCode=p&=1", "invalid_name"),
            ("receipt=\(base64)&productCode=p%0A", "invalid_value"),
            ("receipt=\(base64)&productCode=p&username=\(String(repeating: "u", count: 256))", "parameter_too_long"),
            (
                "receipt=\(base64)&productCode=p&"
                    + (0..<20).map { "v\($0)=\(String(repeating: "m", count: 1000))" }.joined(separator: "&"),
                "metadata_too_large"
            ),
        ]
        for (query, code) in cases {
            switch try parse(query) {
            case .success: Issue.record("accepted: \(query.prefix(80))")
            case .failure(let error):
                #expect(error.codeName == code, "\(query.prefix(80))")
                #expect(error.message.hasSuffix(".") && !error.message.contains(base64))
            }
        }
        // The same value twice (template and body) is fine.
        #expect(try parse("receipt=\(base64)&product=a&productCode=a").get().productCode == "a")
    }

    @Test("JSON bodies: strings, numbers and booleans as text, null skipped, anything else refused")
    func json() throws {
        let (base64, _) = try Fixtures.receipt()
        let body = #"{"username":"johndow","product":"credit5","receipt":"\#(base64)","price":4.99,"quantity":2,"promo":true,"note":null}"#
        let parameters = try SoftphoneJSON.parse(Array(body.utf8)).get()
        let request = try SoftphoneRequest.parse(parameters).get()
        #expect(request.metadata == ["productCode": "credit5", "price": "4.99", "quantity": "2", "promo": "true"])
        #expect(code(SoftphoneJSON.parse(Array(#"{"receipt":["x"]}"#.utf8))) == "invalid_value")
        for bad in ["", "[]", "\"x\"", "{", "{\"a\":1}}"] {
            #expect(code(SoftphoneJSON.parse(Array(bad.utf8))) == "malformed_body", "\(bad)")
        }
    }

    @Test("Fuzz: random and mutated query strings and JSON bodies never crash, and every refusal has a message")
    func fuzz() throws {
        let (base64, receipt) = try Fixtures.receipt()
        let seed = "receipt=\(base64)&productCode=\(receipt.inApp[0].productID)&price=1.99&currency=USD&username=u%20x"
        let jsonSeed = #"{"receipt":"\#(base64)","product":"\#(receipt.inApp[0].productID)","price":1.99}"#
        var random = SeededGenerator(seed: 0x5EED_50F7)
        let alphabet = Array("=&%+ /?#\"{}[]:,\\\u{0}\n\u{7f}aZ09".utf8) + [0xC3, 0xA9, 0xFF, 0xE2]
        // At least 200 inputs however loaded the machine is, then more until 3 seconds or 4,000.
        let deadline = ContinuousClock.now + .seconds(3)
        var iterations = 0
        while iterations < 200 || (ContinuousClock.now < deadline && iterations < 4000) {
            iterations += 1
            var bytes = Array((iterations.isMultiple(of: 2) ? seed : jsonSeed).utf8)
            for _ in 0..<Int.random(in: 1...6, using: &random) {
                let position = Int.random(in: 0..<bytes.count, using: &random)
                switch Int.random(in: 0..<4, using: &random) {
                case 0: bytes[position] = alphabet.randomElement(using: &random)!
                case 1: bytes.insert(alphabet.randomElement(using: &random)!, at: position)
                case 2: bytes.remove(at: position)
                default: bytes = Array(bytes[..<position])
                }
                if bytes.isEmpty { bytes = [UInt8(ascii: "&")] }
            }
            for parsed in [SoftphoneForm.parse(bytes), SoftphoneJSON.parse(bytes)] {
                switch parsed.flatMap(SoftphoneRequest.parse) {
                case .success(let request): #expect(!request.productCode.isEmpty)
                case .failure(let error): #expect(!error.message.isEmpty)
                }
            }
        }
    }
}
