// Runs Apache Kafka's own PartitionChangeBuilder (kafka-metadata 4.3.1) with eligible leader replicas
// (KIP-966) on the cases tests/controller/test_partition_change_elr_vs_kafka.py also runs through
// kbroker's builder, and prints each resulting PartitionChangeRecord in a canonical text form.
// Input lines (one case each, whitespace-separated):
//   <name> <replicas> <isr> <leader> <elr> <lastKnownElr> <acceptable> <election> <minIsr> <elrEnabled>
//          <useLastKnownLeader> <uncleanShutdown> <targetIsr>
// Lists are comma-separated ("_" = empty); a target or unclean-shutdown list of "-" is not set.
// Run in source-file mode with the Kafka jars on the class path.

import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.List;
import java.util.Optional;
import java.util.Set;

import org.apache.kafka.common.DirectoryId;
import org.apache.kafka.common.Uuid;
import org.apache.kafka.common.metadata.PartitionChangeRecord;
import org.apache.kafka.controller.PartitionChangeBuilder;
import org.apache.kafka.metadata.LeaderRecoveryState;
import org.apache.kafka.metadata.PartitionRegistration;
import org.apache.kafka.server.common.ApiMessageAndVersion;
import org.apache.kafka.server.common.MetadataVersion;

public class PartitionChangeElrDiff {
    static List<Integer> list(String s) {
        List<Integer> out = new ArrayList<>();
        if (s.equals("_")) return out;
        for (String p : s.split(",")) out.add(Integer.parseInt(p));
        return out;
    }

    static int[] array(String s) {
        return list(s).stream().mapToInt(Integer::intValue).toArray();
    }

    static String ints(List<Integer> l) {
        return l == null ? "null" : l.toString().replace(" ", "");
    }

    public static void main(String[] args) throws Exception {
        for (String line : Files.readAllLines(Path.of(args[0]))) {
            if (line.isBlank()) continue;
            String[] f = line.trim().split("\\s+");
            int[] replicas = array(f[1]);
            Uuid[] dirs = new Uuid[replicas.length];
            Arrays.fill(dirs, DirectoryId.MIGRATING);
            PartitionRegistration partition = new PartitionRegistration.Builder()
                .setReplicas(replicas).setDirectories(dirs).setIsr(array(f[2]))
                .setLeader(Integer.parseInt(f[3])).setLeaderEpoch(5).setPartitionEpoch(7)
                .setLeaderRecoveryState(LeaderRecoveryState.RECOVERED)
                .setRemovingReplicas(new int[0]).setAddingReplicas(new int[0])
                .setElr(array(f[4])).setLastKnownElr(array(f[5])).build();
            Set<Integer> acceptable = Set.copyOf(list(f[6]));
            PartitionChangeBuilder builder = new PartitionChangeBuilder(partition, Uuid.ONE_UUID, 0,
                acceptable::contains, MetadataVersion.LATEST_PRODUCTION, Integer.parseInt(f[8]),
                Boolean.parseBoolean(f[9]));
            builder.setElection(PartitionChangeBuilder.Election.valueOf(f[7]));
            builder.setUseLastKnownLeaderInBalancedRecovery(Boolean.parseBoolean(f[10]));
            builder.setDefaultDirProvider(b -> new Uuid(0L, 100L + b));
            if (!f[11].equals("-")) builder.setUncleanShutdownReplicas(list(f[11]));
            if (!f[12].equals("-")) builder.setTargetIsr(list(f[12]));
            Optional<ApiMessageAndVersion> built = builder.build();
            if (built.isEmpty()) {
                System.out.println(f[0] + " none");
                continue;
            }
            PartitionChangeRecord r = (PartitionChangeRecord) built.get().message();
            System.out.println(f[0] + " leader=" + r.leader() + " isr=" + ints(r.isr())
                + " lrs=" + r.leaderRecoveryState() + " elr=" + ints(r.eligibleLeaderReplicas())
                + " lkelr=" + ints(r.lastKnownElr()));
        }
    }
}
