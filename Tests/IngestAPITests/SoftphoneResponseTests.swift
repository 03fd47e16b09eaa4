import Foundation
import IngestAPI
import ReceiptCore
import Testing

@Suite("Softphone answers: formats, negotiation, status mapping")
struct SoftphoneResponseTests {
    @Test(
        "Accept negotiation: XML by default, JSON for JSON requests, the highest q otherwise",
        arguments: [
            (nil, false, SoftphoneFormat.xml),
            (nil, true, .json),
            ("*/*", false, .xml),
            ("*/*", true, .json),
            ("application/json", false, .json),
            ("application/x-www-form-urlencoded", true, .form),
            ("text/xml", true, .xml),
            ("application/json;q=0.5, application/x-www-form-urlencoded", false, .form),
            ("application/json;q=0.5, application/xml;q=0.9", true, .xml),
            ("application/*;q=0.2, application/json", false, .json),
            ("application/json;q=0, */*", false, .xml),
            ("image/png", true, .json),
            ("APPLICATION/JSON; charset=utf-8", false, .json),
            ("application/xml;q=0", false, .xml),
        ] as [(String?, Bool, SoftphoneFormat)])
    func negotiation(accept: String?, json: Bool, expected: SoftphoneFormat) {
        #expect(SoftphoneFormat.negotiate(accept: accept, requestWasJSON: json) == expected)
    }

    @Test("Each format carries final=1 and the message, escaped for its syntax")
    func formats() throws {
        let reply = SoftphoneReply(status: 402, message: #"Tom & "Jerry" <b>'s</b>"# + "\u{1}", fields: [.init("product", "a/b c")])
        #expect(
            String(decoding: reply.body(.xml), as: UTF8.self)
                == "<root><final>1</final><message>Tom &amp; &quot;Jerry&quot; &lt;b&gt;&apos;s&lt;/b&gt;\u{FFFD}</message><product>a/b c</product></root>"
        )
        let json = try JSONDecoder().decode([String: String].self, from: Data(reply.body(.json)))
        #expect(json == ["final": "1", "message": reply.message, "product": "a/b c"])
        let form = try SoftphoneForm.parse(reply.body(.form)).get()
        #expect(form == [.init("final", "1"), .init("message", reply.message), .init("product", "a/b c")])
        #expect(String(decoding: reply.body(.form), as: UTF8.self).hasPrefix("final=1&message=Tom%20%26%20"))
        #expect(SoftphoneFormat.xml.contentType == "application/xml")
        #expect(SoftphoneFormat.json.contentType == "application/json")
        #expect(SoftphoneFormat.form.contentType == "application/x-www-form-urlencoded")
    }

    func resource(
        _ status: ValidationStatus, products: [(String, cancelled: Bool)] = [("credit5", false)], conflicts: Set<Int> = []
    ) -> ReceiptResource {
        var purchases: [InAppPurchaseResource] = []
        for (index, product) in products.enumerated() {
            var purchase = InAppPurchase(
                quantity: 1, productID: product.0, transactionID: "t\(index)", originalTransactionID: "t\(index)",
                purchaseDate: Date(timeIntervalSince1970: Double(1000 + index)))
            if product.cancelled { purchase.cancellationDate = Date() }
            purchases.append(InAppPurchaseResource(purchase, isConflict: conflicts.contains(index)))
        }
        return ReceiptResource(
            id: UUID(), style: .unified, appFamilyID: UUID(), bundleID: "b", environment: "sandbox", submission: Submission(),
            validationStatus: status, inAppPurchases: purchases, createdAt: Date(), updatedAt: Date())
    }

    @Test("Outcomes map to 200, 202, 402 and 503, and success names the receipt, product and transaction")
    func statuses() {
        let valid = resource(.valid, products: [("credit5", false), ("credit5", false), ("other", false)])
        let ok = SoftphoneService.reply(to: .validated(valid), product: "credit5")
        #expect(ok.status == 200)
        #expect(ok.fields.first { $0.name == "receipt_id" }?.value == valid.id.uuidString.lowercased())
        #expect(ok.fields.first { $0.name == "transaction_id" }?.value == "t1")
        #expect(ok.fields.first { $0.name == "validation_status" }?.value == "valid")
        #expect(SoftphoneService.reply(to: .queued(resource(.pending)), product: "credit5").status == 202)
        #expect(SoftphoneService.reply(to: .queued(resource(.failed)), product: "credit5").status == 202)
        #expect(SoftphoneService.reply(to: .validated(resource(.invalid)), product: "credit5").status == 402)
        #expect(SoftphoneService.reply(to: .fraud(resource(.fraud)), product: "credit5").status == 402)
        #expect(SoftphoneService.reply(to: .validated(resource(.valid)), product: "credit10").status == 402)
        #expect(
            SoftphoneService.reply(to: .validated(resource(.valid, products: [("credit5", true)])), product: "credit5").status == 402)
        #expect(SoftphoneService.reply(to: .unavailable, product: "credit5").status == 503)
        // A transaction another account already presented is not credited again; an unclaimed one of
        // the same product still is.
        let shared = resource(.valid, products: [("credit5", false)], conflicts: [0])
        #expect(SoftphoneService.reply(to: .validated(shared), product: "credit5").status == 402)
        let mixed = resource(.valid, products: [("credit5", false), ("credit5", false)], conflicts: [1])
        #expect(
            SoftphoneService.reply(to: .validated(mixed), product: "credit5").fields.first { $0.name == "transaction_id" }?.value == "t0")
        for outcome in [ReceiptIngestion.Outcome.validated(resource(.invalid)), .fraud(resource(.fraud)), .unavailable] {
            #expect(!SoftphoneService.reply(to: outcome, product: "credit5").message.isEmpty)
        }
    }
}
