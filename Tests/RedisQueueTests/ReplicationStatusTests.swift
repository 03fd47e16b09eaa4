import ReceiptCore
import RedisJobQueue
import SystemTesting
import Testing

@Suite("Redis replication status", .blockingWork)
struct ReplicationStatusTests {
    @Test("INFO replication of a primary: online replicas counted, the worst lag in seconds and in bytes")
    func primary() {
        let info = """
            # Replication\r
            role:master\r
            connected_slaves:3\r
            slave0:ip=10.0.0.2,port=6379,state=online,offset=1000,lag=0\r
            slave1:ip=10.0.0.3,port=6379,state=online,offset=900,lag=2\r
            slave2:ip=10.0.0.4,port=6379,state=wait_bgsave,offset=0,lag=0\r
            master_failover_state:no-failover\r
            master_repl_offset:1200\r
            """
        #expect(ReplicationStatus.parse(info: info) == ReplicationStatus(replicas: 2, lagSeconds: 2, lagBytes: 300))
    }

    @Test("A replica's answer, a primary without replicas, and nonsense are no replicas")
    func none() {
        #expect(ReplicationStatus.parse(info: "role:slave\r\nmaster_host:10.0.0.1\r\nmaster_repl_offset:5\r\n") == ReplicationStatus())
        #expect(ReplicationStatus.parse(info: "role:master\r\nconnected_slaves:0\r\nmaster_repl_offset:5\r\n") == ReplicationStatus())
        #expect(
            ReplicationStatus.parse(info: "role:master\nslave0:garbage\nslavex:state=online,offset=1\nmaster_repl_offset:x") == ReplicationStatus())
        #expect(ReplicationStatus.parse(info: "") == ReplicationStatus())
    }
}
