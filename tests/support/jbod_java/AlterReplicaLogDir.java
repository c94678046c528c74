// Moves one replica to another log directory with the Java Admin API (KIP-113), then waits until
// describeReplicaLogDirs reports it there with no future replica left. Run as a single-file source
// program:
//
//   java -cp <kafka-clients classpath> AlterReplicaLogDir.java BOOTSTRAP TOPIC PARTITION BROKER_ID DIR
//
// Prints one line per step on stdout:
//   ALTERED                          alterReplicaLogDirs succeeded for the replica
//   MOVING <future dir> <lag>        while a future replica exists (zero or more lines)
//   CURRENT <dir>                    the replica's directory once no future replica is left
// and exits 0; on an error it prints ERROR <exception class> <message> and exits 1.
import java.util.List;
import java.util.Map;
import java.util.Properties;
import org.apache.kafka.clients.admin.Admin;
import org.apache.kafka.clients.admin.AdminClientConfig;
import org.apache.kafka.clients.admin.DescribeReplicaLogDirsResult.ReplicaLogDirInfo;
import org.apache.kafka.common.TopicPartitionReplica;

public class AlterReplicaLogDir {
    public static void main(String[] args) throws Exception {
        Properties props = new Properties();
        props.put(AdminClientConfig.BOOTSTRAP_SERVERS_CONFIG, args[0]);
        TopicPartitionReplica replica = new TopicPartitionReplica(args[1], Integer.parseInt(args[2]), Integer.parseInt(args[3]));
        String dir = args[4];
        try (Admin admin = Admin.create(props)) {
            admin.alterReplicaLogDirs(Map.of(replica, dir)).all().get();
            System.out.println("ALTERED");
            long deadline = System.currentTimeMillis() + 60_000;
            while (true) {
                ReplicaLogDirInfo info = admin.describeReplicaLogDirs(List.of(replica)).all().get().get(replica);
                if (info.getFutureReplicaLogDir() == null) {
                    System.out.println("CURRENT " + info.getCurrentReplicaLogDir());
                    return;
                }
                System.out.println("MOVING " + info.getFutureReplicaLogDir() + " " + info.getFutureReplicaOffsetLag());
                if (System.currentTimeMillis() > deadline) {
                    System.out.println("ERROR timeout still moving");
                    System.exit(1);
                }
                Thread.sleep(50);
            }
        } catch (Exception e) {
            Throwable cause = e.getCause() != null ? e.getCause() : e;
            System.out.println("ERROR " + cause.getClass().getName() + " " + cause.getMessage());
            System.exit(1);
        }
    }
}
